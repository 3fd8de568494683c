"""Offline Bicep checks (no Bicep compiler): parse every file with tree-sitter-bicep, then check
symbols, local module contracts and registry module pins. See ``python -m tools.bicepcheck``."""
