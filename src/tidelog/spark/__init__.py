"""tidelog.spark (see DESIGN.md, Layers)."""
