#!/usr/bin/env bash
# The .deb of a major this machine has no Debian package of (16, 17, 18 are
# relocatable installs here, so nothing satisfies its Depends: docs/install.md)
# is checked without installing it: built with scripts/package.sh --pg NN, it
# holds exactly the extension's files that scripts/install.sh just installed
# into that major (same names, same SQL, the library of the same build,
# stripped), at the paths of apt.postgresql.org's postgresql-NN, and depends
# on postgresql-NN. scripts/test_major.sh runs it after the major's regress.
#   AEDB_PG_MAJOR=NN bash scripts/package_contents_test.sh
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"
fail() { printf '\npackage contents test FAILED: %s\n' "$*" >&2; exit 1; }

WORK=$TEST_DIR/package-contents
rm -rf "$WORK" && mkdir -p "$WORK"
deb=$(bash scripts/package.sh --pg "$PG_MAJOR" --debug --out "$WORK" 2>"$WORK/package.log") ||
    { cat "$WORK/package.log" >&2; fail "scripts/package.sh --pg $PG_MAJOR"; }
[ "$(dpkg-deb -f "$deb" Package)" = "postgresql-$PG_MAJOR-aedb-queue" ] || fail "the package's name: $(dpkg-deb -f "$deb" Package)"
dpkg-deb -f "$deb" Depends | tr ',' '\n' | grep -qx " *postgresql-$PG_MAJOR" ||
    fail "Depends does not name postgresql-$PG_MAJOR: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -x "$deb" "$WORK/root"

installed=$("$PG_CONFIG" --sharedir)/extension
packaged=$WORK/root/usr/share/postgresql/$PG_MAJOR/extension
# Every aedb_queue* file the development install put there is packaged, unchanged, and nothing else.
diff <(cd "$installed" && ls aedb_queue* | sort) <(cd "$packaged" && ls | sort) >&2 ||
    fail "the packaged extension files differ from those installed into $installed (diff above)"
# The install script of this version is generated anew by each build, and
# pgrx orders its statements differently from one generation to the next:
# it must hold the same lines. Every other file is copied, byte for byte.
version=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
for f in "$packaged"/*; do
    name=$(basename "$f")
    if [ "$name" = "aedb_queue--$version.sql" ]; then
        cmp -s <(sort "$f") <(sort "$installed/$name") || fail "$name holds other statements than the installed one"
    else
        cmp -s "$f" "$installed/$name" || fail "$name differs from the installed one"
    fi
done
lib=$WORK/root/usr/lib/postgresql/$PG_MAJOR/lib/aedb_queue.so
[ -f "$lib" ] || fail "no library at /usr/lib/postgresql/$PG_MAJOR/lib/aedb_queue.so"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    -o "$WORK/installed.so" "$("$PG_CONFIG" --pkglibdir)/aedb_queue.so"
cmp -s "$lib" "$WORK/installed.so" || fail "the packaged library is not the installed build, stripped"
n=$(ls "$packaged" | wc -l)
echo "   $(basename "$deb"): Depends postgresql-$PG_MAJOR; $n extension files and the library at postgresql-$PG_MAJOR's paths, the same as installed"
