#!/usr/bin/env bash
# The Python venv the APNs/FCM stand-ins (Tests/PushStandIns/standin.py) run in: .build/standins-venv
# from Tests/PushStandIns/requirements.txt. Prints the venv's python path (see python-venv.sh).
exec bash "$(dirname "$0")/python-venv.sh" standins Tests/PushStandIns/requirements.txt
