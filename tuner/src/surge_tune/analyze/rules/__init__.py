"""One rule per cause of slow I/O; ALL_RULES is the order they run in."""

from surge_tune.analyze.rules.collective_aggregators import FewCollectiveAggregators
from surge_tune.analyze.rules.fpp_metadata_storm import FilePerProcessMetadataStorm
from surge_tune.analyze.rules.fsync_per_write import FsyncPerWrite
from surge_tune.analyze.rules.independent_io import IndependentInsteadOfCollective
from surge_tune.analyze.rules.load_imbalance import LoadImbalance, Straggler
from surge_tune.analyze.rules.metadata_bound import MetadataBound
from surge_tune.analyze.rules.random_access import RandomAccess
from surge_tune.analyze.rules.shared_file_layout import SharedFileLayout
from surge_tune.analyze.rules.small_transfers import SmallOrUnalignedTransfers
from surge_tune.analyze.rules.stdio_bulk import StdioBulkData

ALL_RULES = [
    SmallOrUnalignedTransfers(),
    RandomAccess(),
    MetadataBound(),
    LoadImbalance(),
    Straggler(),
    SharedFileLayout(),
    StdioBulkData(),
    IndependentInsteadOfCollective(),
    FilePerProcessMetadataStorm(),
    FsyncPerWrite(),
    FewCollectiveAggregators(),
]
