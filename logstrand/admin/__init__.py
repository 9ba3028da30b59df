"""Documents for operators (``_docs``), shared by the CLI and the console."""

from ._docs import info_doc, node_state, rebuilding_doc, sequencer_doc, status_row, tier_doc

__all__ = [
    "info_doc",
    "node_state",
    "rebuilding_doc",
    "sequencer_doc",
    "status_row",
    "tier_doc",
]
