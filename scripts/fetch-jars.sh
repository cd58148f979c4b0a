#!/usr/bin/env bash
# Fetch the Java jars the compatibility tests (tests/compat/) need, from Maven Central, with Maven.
#
#   scripts/fetch-jars.sh [DEST] [SET...]
#
# DEST defaults to .deps/jars (git-ignored); each set goes to DEST/<set>/:
#   kafka-clients-3.9   org.apache.kafka:kafka-clients:3.9.1            + slf4j-simple
#   kafka-clients-4     org.apache.kafka:kafka-clients:<4.x>            + slf4j-simple
#   kafka-tools         org.apache.kafka:kafka-tools:<4.x> with its runtime dependencies
#                       (org.apache.kafka.tools.consumer.group.ConsumerGroupCommand) + slf4j-simple
#   kafka-server        org.apache.kafka:kafka_2.13:<4.x> with its runtime dependencies (kafka.Kafka, the
#                       KRaft broker, and kafka.tools.StorageTool) + slf4j-simple; used by bench/compare.py
# <4.x> is the first of KAFKA4_VERSIONS (default "4.1.1 4.1.0 4.0.1 4.0.0") that resolves.
# With no SET, the first three are fetched (kafka-server only on request).
#
# Idempotent: a set whose directory holds a .complete marker is skipped. Maven caches what it downloads in
# ~/.m2 (or wherever MAVEN_OPTS/-Dmaven.repo.local points: extra Maven arguments go in FETCH_JARS_MVN_ARGS).
# Needs java and mvn on PATH and access to Maven Central (or a mirror configured in ~/.m2/settings.xml).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$REPO_ROOT/.deps/jars}"
shift || true
SETS=("$@")
if [ "${#SETS[@]}" -eq 0 ]; then
    SETS=(kafka-clients-3.9 kafka-clients-4 kafka-tools)
fi
KAFKA39_VERSION="${KAFKA39_VERSION:-3.9.1}"
read -r -a KAFKA4_VERSIONS <<<"${KAFKA4_VERSIONS:-4.1.1 4.1.0 4.0.1 4.0.0}"
SLF4J_VERSION="${SLF4J_VERSION:-2.0.16}"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
read -r -a EXTRA_MVN_ARGS <<<"${FETCH_JARS_MVN_ARGS:-}"

command -v mvn >/dev/null 2>&1 || { echo "fetch-jars: mvn not found on PATH" >&2; exit 1; }
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# write_pom DIR ARTIFACT VERSION: a throwaway pom depending on org.apache.kafka:ARTIFACT:VERSION and slf4j.
# slf4j-api is pinned at depth 1 so slf4j-simple (2.x, ServiceLoader binding) matches it.
write_pom() {
    local dir="$1" artifact="$2" version="$3"
    mkdir -p "$dir"
    cat >"$dir/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.fetchjars</groupId>
  <artifactId>fetch-${artifact}</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>${artifact}</artifactId>
      <version>${version}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-api</artifactId>
      <version>${SLF4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>${SLF4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
}

# resolve SET ARTIFACT VERSION...: copy ARTIFACT (first VERSION that resolves) and its runtime deps to DEST/SET.
resolve() {
    local set="$1" artifact="$2"
    shift 2
    local out="$DEST/$set"
    if [ -f "$out/.complete" ]; then
        echo "fetch-jars: $set already present in $out ($(cat "$out/.complete"))"
        return 0
    fi
    local version dir tmp_out
    for version in "$@"; do
        dir="$WORK/$set-$version"
        tmp_out="$WORK/$set-$version-jars"
        write_pom "$dir" "$artifact" "$version"
        echo "fetch-jars: resolving org.apache.kafka:$artifact:$version for $set ..."
        if mvn -q -B -f "$dir/pom.xml" "${EXTRA_MVN_ARGS[@]}" "$DEP_PLUGIN:copy-dependencies" \
            -DincludeScope=runtime -DoutputDirectory="$tmp_out" >"$dir/mvn.log" 2>&1; then
            rm -rf "$out"
            mkdir -p "$(dirname "$out")"
            mv "$tmp_out" "$out"
            echo "org.apache.kafka:$artifact:$version" >"$out/.complete"
            echo "fetch-jars: $set -> $out ($(find "$out" -name '*.jar' | wc -l) jars, $artifact $version)"
            return 0
        fi
        echo "fetch-jars: org.apache.kafka:$artifact:$version did not resolve:" >&2
        tail -n 15 "$dir/mvn.log" >&2
    done
    echo "fetch-jars: could not resolve any of org.apache.kafka:$artifact:{$*}" >&2
    return 1
}

for set in "${SETS[@]}"; do
    case "$set" in
        kafka-clients-3.9) resolve "$set" kafka-clients "$KAFKA39_VERSION" ;;
        kafka-clients-4) resolve "$set" kafka-clients "${KAFKA4_VERSIONS[@]}" ;;
        kafka-tools)
            # Same 4.x as kafka-clients-4 when that set is already there, so both sets agree.
            versions=("${KAFKA4_VERSIONS[@]}")
            if [ -f "$DEST/kafka-clients-4/.complete" ]; then
                versions=("$(cut -d: -f3 <"$DEST/kafka-clients-4/.complete")")
            fi
            resolve "$set" kafka-tools "${versions[@]}"
            ;;
        kafka-server) resolve "$set" kafka_2.13 "${KAFKA4_VERSIONS[@]}" ;;
        *) echo "fetch-jars: unknown set '$set' (known: kafka-clients-3.9 kafka-clients-4 kafka-tools kafka-server)" >&2; exit 2 ;;
    esac
done
