"""tidelog.server (see DESIGN.md, Layers)."""
