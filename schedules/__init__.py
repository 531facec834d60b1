"""Strategy templates (TOML data), shipped inside kb_tvm as kb_tvm.schedules."""
