"""tidelog.testing (see DESIGN.md, Layers)."""
