"""``python -m leaseq.cli``: the ``leaseq`` command."""

from leaseq.cli.main import main

main()
