"""tidelog.controller (see DESIGN.md, Layers)."""
