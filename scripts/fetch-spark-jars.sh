#!/usr/bin/env bash
# Fetch Spark's Kafka connector (the built-in `kafka` source and sink) from Maven Central, with Maven.
#
#   scripts/fetch-spark-jars.sh [SPARK_VERSION] [DEST]
#
# SPARK_VERSION defaults to the pyspark installed in .venv (the connector must match Spark's own jars);
# DEST defaults to .deps/jars (git-ignored). The jars go to DEST/spark-kafka-<SPARK_VERSION>/:
#   org.apache.spark:spark-sql-kafka-0-10_2.13:<ver>, org.apache.spark:spark-token-provider-kafka-0-10_2.13:<ver>,
#   org.apache.kafka:kafka-clients (the version that Spark release pins), org.apache.commons:commons-pool2 and
#   com.google.code.findbugs:jsr305, at the versions the connector's pom names.
# Everything else the connector needs at run time (scala, lz4, snappy, zstd, slf4j, hadoop client) is already in
# pyspark/jars, so only these five are kept: a second copy of any of those on the classpath would clash.
#
# Idempotent: a directory holding a .complete marker is skipped. Maven caches downloads in ~/.m2 (extra Maven
# arguments go in FETCH_JARS_MVN_ARGS, e.g. -Dmaven.repo.local=...). Needs mvn (and java) on PATH.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${1:-}"
DEST="${2:-$REPO_ROOT/.deps/jars}"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
KEEP="spark-sql-kafka-0-10_2.13,spark-token-provider-kafka-0-10_2.13,kafka-clients,commons-pool2,jsr305"
read -r -a EXTRA_MVN_ARGS <<<"${FETCH_JARS_MVN_ARGS:-}"

if [ -z "$VERSION" ]; then
    PY="$REPO_ROOT/.venv/bin/python"
    [ -x "$PY" ] || PY=python3
    VERSION="$("$PY" -c 'import pyspark; print(pyspark.__version__)')" || {
        echo "fetch-spark-jars: no SPARK_VERSION given and pyspark is not installed" >&2
        exit 2
    }
fi
out="$DEST/spark-kafka-$VERSION"
if [ -f "$out/.complete" ]; then
    echo "fetch-spark-jars: already present in $out"
    exit 0
fi
command -v mvn >/dev/null 2>&1 || { echo "fetch-spark-jars: mvn not found on PATH" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.fetchjars</groupId>
  <artifactId>fetch-spark-kafka</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>${VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
echo "fetch-spark-jars: resolving org.apache.spark:spark-sql-kafka-0-10_2.13:$VERSION ..."
if ! mvn -q -B -f "$WORK/pom.xml" "${EXTRA_MVN_ARGS[@]}" "$DEP_PLUGIN:copy-dependencies" \
    -DincludeScope=runtime -DincludeArtifactIds="$KEEP" -DoutputDirectory="$WORK/jars" >"$WORK/mvn.log" 2>&1; then
    echo "fetch-spark-jars: could not resolve the Kafka connector for Spark $VERSION:" >&2
    tail -n 15 "$WORK/mvn.log" >&2
    exit 1
fi
count="$(find "$WORK/jars" -name '*.jar' | wc -l)"
if [ "$count" -ne 5 ]; then
    echo "fetch-spark-jars: expected 5 jars, got $count: $(ls "$WORK/jars")" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$DEST"
mv "$WORK/jars" "$out"
echo "org.apache.spark:spark-sql-kafka-0-10_2.13:$VERSION" >"$out/.complete"
echo "fetch-spark-jars: $out ($(find "$out" -name '*.jar' -printf '%f ' | sort))"
