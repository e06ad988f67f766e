#!/usr/bin/env bash
# Builds a Debian package of the extension (docs/install.md):
#   scripts/package.sh [--pg NN] [--debug] [--revision N] [--out DIR]
# writes DIR/postgresql-NN-aedb-queue_<version>-<N>_<arch>.deb (default: PostgreSQL
# 15, a release build, revision 1, DIR target/debian) and prints its path last.
#
# It holds what scripts/install.sh installs (stage_extension, scripts/common.sh:
# the library, the control file, the install scripts of every version, the
# upgrade scripts, the router) at the paths of Debian's PostgreSQL packages
# (/usr/lib/postgresql/NN/lib, /usr/share/postgresql/NN/extension), and the
# README, docs/ and the copyright (LICENSE) in /usr/share/doc/<package>/.
# Version: the extension's (Cargo.toml) and the Debian revision N.
# Depends: postgresql-NN and the C libraries the library links
# (dpkg-shlibdeps).
#
# --pg 16|17|18 builds against the relocatable install of that major
# (scripts/pg_major.sh, under /opt/aedb-pg/NN) and packages for the same
# paths as 15, those of apt.postgresql.org's postgresql-NN packages; the
# library only depends on the major's server ABI.
# --debug packages the debug build (what scripts/install.sh builds, so warm:
# scripts/package_test.sh uses it), stripped like the release build.
set -euo pipefail

major=${AEDB_PG_MAJOR:-15} profile=() revision=1 out=
while (($#)); do
    case "$1" in
    --pg) major=${2:?--pg needs a major}; shift 2 ;;
    --debug) profile=(--debug); shift ;;
    --revision) revision=${2:?--revision needs a number}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    *) echo "usage: $0 [--pg NN] [--debug] [--revision N] [--out DIR]" >&2; exit 2 ;;
    esac
done
[[ $revision =~ ^[0-9][0-9a-z.+~]*$ ]] || { echo "package.sh: --revision '$revision' is not a Debian revision (1, 2, 1.1, ...)" >&2; exit 2; }
export AEDB_PG_MAJOR=$major
source "$(dirname "$0")/common.sh"
cd "$ROOT"
[ -x "$PG_CONFIG" ] || { echo "package.sh: no PostgreSQL $major ($PG_CONFIG): scripts/setup.sh --pg $major" >&2; exit 1; }

package=postgresql-$major-aedb-queue
version=$(sed -n '/^\[package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)-$revision
arch=$(dpkg --print-architecture)
target=${CARGO_TARGET_DIR:-$ROOT/target}
out=${out:-$target/debian}
stage=$target/aedb_queue-package-pg$major
# Laid out as debhelper would (debian/control, debian/<package>/), which is
# where dpkg-shlibdeps expects the library it reads.
work=$target/aedb_queue-deb-pg$major
root=$work/debian/$package

stage_extension "$stage" "${profile[@]}" >&2

rm -rf "$work"
lib=$root/usr/lib/postgresql/$major/lib
ext=$root/usr/share/postgresql/$major/extension
doc=$root/usr/share/doc/$package
mkdir -p "$lib" "$ext" "$doc" "$root/DEBIAN"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
    -o "$lib/aedb_queue.so" "$stage$("$PG_CONFIG" --pkglibdir)/aedb_queue.so"
cp "$stage$("$PG_CONFIG" --sharedir)"/extension/* "$ext/"

# Documentation: the README and docs/*.md; compressed when over 4 KiB, as
# Debian's policy asks.
cp README.md "$doc/"
cp docs/*.md "$doc/"
find "$doc" -name '*.md' -size +4k -exec gzip -9n {} +
maintainer=${AEDB_DEB_MAINTAINER:-$(git log -1 --format='%an <%ae>')}
# The copyright file names the license and, as Debian's policy asks for the
# licenses every Debian system has, refers to its text there: the same text as
# LICENSE (scripts/package_test.sh compares them).
years=$(git log --format=%ad --date=format:%Y | sort -u | sed -n '1p;$p' | uniq | paste -sd-)
cat >"$doc/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: aedb_queue

Files: *
Copyright: $years the aedb_queue authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this software except in compliance with the License. Unless required by
 applicable law or agreed to in writing, software distributed under the
 License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS
 OF ANY KIND, either express or implied.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0 (the repository's LICENSE).
COPYRIGHT
{
    echo "$package ($version) unstable; urgency=medium"
    echo
    echo "  * Built by scripts/package.sh from aedb_queue commit $(git rev-parse --short HEAD)."
    echo
    echo " -- $maintainer  $(git log -1 --format=%aD)"
} | gzip -9n >"$doc/changelog.Debian.gz"

find "$root" -type d -exec chmod 755 {} +
find "$root" -type f -exec chmod 644 {} +

printf 'Source: aedb-queue\n\nPackage: %s\nArchitecture: any\n' "$package" >"$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O -e"$lib/aedb_queue.so" | sed -n 's/^shlibs:Depends=//p')
cat >"$root/DEBIAN/control" <<CONTROL
Package: $package
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: postgresql-$major, $shlibs
Suggests: postgresql-$major-cron, postgresql-$major-plproxy
Section: database
Priority: optional
Description: durable task and timer queue inside PostgreSQL $major
 aedb_queue is a PostgreSQL extension: producers enqueue tasks in their own
 transactions, workers claim them under leases, settle them with fencing
 tokens, and retry, delay or dead-letter them; per-queue grants and tenant
 confinement decide who may do what.
 .
 This package holds the extension for PostgreSQL $major: the library, the
 control file, the install scripts of every version and the upgrade scripts
 between them (ALTER EXTENSION aedb_queue UPDATE), and the router
 (aedb_queue_router, on PL/Proxy). Then, in a database:
 CREATE EXTENSION aedb_queue;
CONTROL
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/md5sums"

mkdir -p "$out"
deb=$out/${package}_${version}_$arch.deb
dpkg-deb --root-owner-group --build "$root" "$deb" >&2
echo "$deb"
