"""A multirun: plan the jobs (compose, order, resume), launch them, report on them."""
