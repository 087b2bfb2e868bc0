#!/usr/bin/env bash
# The Python venv schemathesis runs in for the OpenAPI property test
# (Tests/RouseServerTests/OpenAPIPropertyTests.swift): .build/property-venv from
# Tests/PropertyTests/requirements.txt. Prints the venv's python path (see python-venv.sh).
exec bash "$(dirname "$0")/python-venv.sh" property Tests/PropertyTests/requirements.txt
