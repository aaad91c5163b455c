#!/bin/sh
echo "coverage is not available in Stoker's offline build" >&2
exit 1
