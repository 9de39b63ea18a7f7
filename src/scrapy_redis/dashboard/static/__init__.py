"""The dashboard's page, script and style sheet (package data, read by web.asset())."""
