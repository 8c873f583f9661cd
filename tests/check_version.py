#!/usr/bin/env python3
"""The three version strings agree: flashattn.h's FLASHATTN_VERSION_* macros, the Meson project
version (argument 1) and the newest released section of CHANGELOG.md."""
import os
import re
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
hdr = open(os.path.join(root, "flashattn.h")).read()
m = {k: re.search(r"#define FLASHATTN_VERSION_%s (\S+)" % k, hdr).group(1) for k in ("MAJOR", "MINOR", "PATCH", "STRING")}
header = "%s.%s.%s" % (m["MAJOR"], m["MINOR"], m["PATCH"])
changelog = re.search(r"^## \[(\d+\.\d+\.\d+)\]", open(os.path.join(root, "CHANGELOG.md")).read(), re.M).group(1)
found = {"flashattn.h macros": header, "FLASHATTN_VERSION_STRING": m["STRING"].strip('"'),
         "meson.build": sys.argv[1], "CHANGELOG.md": changelog}
if len(set(found.values())) != 1:
    print("check_version: versions differ: " + ", ".join("%s %s" % kv for kv in found.items()))
    sys.exit(1)
print("check_version: %s everywhere (%s)" % (header, ", ".join(found)))
