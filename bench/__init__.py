"""Benchmarks run by ``leaseq bench ...``: each starts its own daemons (real
subprocesses on a free loopback port and a temporary data directory), drives
them with redis-py and prints figures.  Nothing here asserts a figure.

``common`` holds what every benchmark shares (starting and stopping a daemon,
free port, RSS, INFO, percentiles, the table); one module per benchmark
(``storage``).
"""
