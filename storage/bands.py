"""A ready job's *band*: its place in the claim order, as one small number.

Ready jobs are claimed higher priority first (``PRIORITY`` 0 to 9, 9 the
highest); within a priority, jobs ready again (an expired lease, a nack)
before jobs never handed out; then by ascending id.  The band folds the
first two into one number, 0 claimed first, ``BANDS - 1`` last:

    band = (9 - priority) * 2 + (0 if ready again else 1)

so that (band, id) is the whole claim order.  The ready indexes
(storage/index.py and its compiled engine storage/_index.pyx) keep ids by
band, a group's turn is ordered by its head job's band (storage/groups.py),
and a snapshot's plain jobs are placed by it (storage/snapshot.py): all of
them ask ``band`` here.  Compiled from this file in the compiled flavour
(bands.pxd), so that compiled callers reach it as a C function."""

BANDS = 20       # priorities 0..9, each ready again or not


def band(priority: int, requeued: bool) -> int:
    """The band of a ready job of ``priority``, ready again (``requeued``)
    or not."""
    return (9 - priority) * 2 + (0 if requeued else 1)
