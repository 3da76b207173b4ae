from .flavour import install as _install_flavour

_install_flavour()     # LEASEQ_PURE=1: modules compiled from their .py load from it (storage/flavour.py)
