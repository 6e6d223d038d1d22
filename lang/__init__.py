"""DL's front end: parsing, diagnostics, the AST, the checker and autodiff."""
