# test/bench/lib.sh: helpers shared by run.sh and all.sh (sourced).
# shellcheck shell=bash

# A label for a key count: "hot key" for 1, else "10,000 keys".
keys_label() {
	if [ "$1" = 1 ]; then
		echo "hot key"
	else
		echo "$(sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\(,\|$\)/\1,\2\3/' -e 'ta' <<<"$1") keys"
	fi
}
