#!/usr/bin/env bash
# The Python venv the admin pages' browser test runs its WebDriver client in
# (Tests/BrowserTests/admin_pages.py, driven by Tests/RouseServerTests/AdminPagesBrowserTests.swift):
# .build/browser-venv from Tests/BrowserTests/requirements.txt. Prints the venv's python path (see python-venv.sh).
exec bash "$(dirname "$0")/python-venv.sh" browser Tests/BrowserTests/requirements.txt
