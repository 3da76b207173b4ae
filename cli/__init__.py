"""The ``leaseq`` command line (``cli.main``): the one room that imports the
others it runs (the daemon, the offline check, the Spark report, the benchmarks)."""
