import os

PLANTED = os.environ.get("RAYKIT_BUGS") == "1"
