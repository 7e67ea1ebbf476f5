"""tidelog.cli (see DESIGN.md, Layers)."""
