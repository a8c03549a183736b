import os

PLANTED = os.environ.get("FASTOPS_BUGS") == "1"
