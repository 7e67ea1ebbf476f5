"""tidelog.storage (see DESIGN.md, Layers)."""
