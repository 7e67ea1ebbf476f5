"""tidelog.client (see DESIGN.md, Layers)."""
