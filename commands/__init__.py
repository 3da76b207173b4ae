from leaseq.storage import flavour as _flavour     # (installs the flavour's finder first: storage/flavour.py)
