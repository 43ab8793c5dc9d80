#!/usr/bin/env bash
# Fetch Apache Kafka (org.apache.kafka:kafka_2.13 and its runtime dependencies, from Maven
# Central) into ~/.cache/etj/kafka/<version>/lib/, for the tests that train from a real
# broker (etj_testcluster.kafka runs it in KRaft mode on the installed Java 17). Called by
# `make kafka`. A cached version is not fetched again: a warm run is a file check.
#
# Why Maven and not the release tarball: Maven Central is what these machines reach (the
# Apache download mirrors are not); a two-line pom and `mvn dependency:copy-dependencies`
# resolve exactly the broker's runtime classpath. Maven's own repository is kept under
# ~/.cache/etj/m2 so nothing outside the etj cache is written.
set -euo pipefail

KAFKA_VERSION="${ETJ_KAFKA_VERSION:-4.4.0}"
CACHE="${ETJ_CACHE:-$HOME/.cache/etj}"
DIR="$CACHE/kafka/$KAFKA_VERSION"

say() { printf '[build-kafka %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

mkdir -p "$CACHE/kafka"
# One fetch at a time (etj_testcluster.kafka.build_lock: keep the paths in step).
exec 9>"$CACHE/kafka/$KAFKA_VERSION.lock"
flock 9
if [ -f "$DIR/lib/.complete" ]; then say "kafka $KAFKA_VERSION: cached"; exit 0; fi
command -v mvn >/dev/null || { echo "build-kafka: mvn (Maven) is required" >&2; exit 1; }
command -v java >/dev/null || { echo "build-kafka: java (17 or newer) is required" >&2; exit 1; }
rm -rf "$DIR/lib" && mkdir -p "$DIR"
cat > "$DIR/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.etj</groupId>
  <artifactId>kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- The broker logs through SLF4J; without a binding it logs nothing at all. -->
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
POM
say "kafka $KAFKA_VERSION: resolving from Maven Central"
start=$SECONDS
(cd "$DIR" && nice -n 10 mvn -B -q -Dmaven.repo.local="$CACHE/m2" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$DIR/lib.tmp")
mv "$DIR/lib.tmp" "$DIR/lib"
touch "$DIR/lib/.complete"
say "kafka $KAFKA_VERSION: $(ls "$DIR/lib" | wc -l) jars in $((SECONDS - start)) s"
