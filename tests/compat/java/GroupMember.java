// A Java (Apache kafka-clients) consumer-group member for the compatibility tests: subscribe, process, commitSync
// after each poll. The Java counterpart of tests/e2e/groups/clients/ck_member.py; compiled by the tests with javac
// against a kafka-clients jar set (3.9.x or 4.x; it uses only API both have).
//
// A commit the client refuses while it rebalances (RebalanceInProgressException: the Java client sends no commit
// then) is kept and sent again with the next one, and the offsets of a partition being revoked are committed in
// onPartitionsRevoked, as the Java client's documentation advises: otherwise the next owner of a partition revoked
// right after a refused commit would consume its records again.
//
// Usage: java -cp CLASSES:JARS/* GroupMember --bootstrap HOST:PORT --topic T --group G [--instance-id ID]
//            [--assignor range|roundrobin|sticky|cooperative-sticky] [--name NAME] [--client-id ID]
//            [--max-runtime SECONDS] [--commit sync|none] [--regex] [--set consumer.property=value]...
// --regex: --topic is a regular expression, subscribed as a SubscriptionPattern (kafka-clients 4.x: with the
// consumer group protocol the server resolves it, in RE2/J's dialect, against every topic, created later too).
//
// Events: one JSON object per line on stdout, flushed at once (same shapes as tests/e2e/groups/clients/_events.py):
//   {"ev": NAME, "t": UNIX_SECONDS, "member": NAME, ...}
//   started (pid, client_version) / subscribed
//   assigned (partitions, held, protocol, member_id, topics) / revoked (partitions, held, protocol) / lost (...)
//   records (recs: [[partition, offset, key_hex], ...], topics) / commit (offsets: {partition: next_offset})
//   commit_error (offsets, error: {name, str}) / error (source, code, name, str, fatal, retriable)
//   closing (fatal) / closed / exiting
// Commands, one a line on stdin: close (close the consumer, exit 0), exit (halt at once, like a crash but the
// kernel closes the sockets). End of stdin counts as close. Client logging (slf4j-simple) goes to stderr.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.LinkedBlockingQueue;

import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.AppInfoParser;

public final class GroupMember {
    private static String name = "java";

    // -- JSON output --------------------------------------------------------------------------------------------
    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder(s.length() + 2).append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
            }
        }
        return b.append('"').toString();
    }

    static String json(Object v) {
        if (v == null) return "null";
        if (v instanceof String) return quote((String) v);
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        if (v instanceof Map) {
            StringBuilder b = new StringBuilder("{");
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) b.append(", ");
                first = false;
                b.append(quote(String.valueOf(e.getKey()))).append(": ").append(json(e.getValue()));
            }
            return b.append('}').toString();
        }
        if (v instanceof Collection) {
            StringBuilder b = new StringBuilder("[");
            boolean first = true;
            for (Object o : (Collection<?>) v) {
                if (!first) b.append(", ");
                first = false;
                b.append(json(o));
            }
            return b.append(']').toString();
        }
        return quote(v.toString());
    }

    static synchronized void emit(String ev, Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("ev", ev);
        m.put("t", System.currentTimeMillis() / 1000.0);
        m.put("member", name);
        for (int i = 0; i + 1 < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        System.out.println(json(m));
        System.out.flush();
    }

    static String hex(byte[] data) {
        if (data == null) return null;
        StringBuilder b = new StringBuilder(data.length * 2);
        for (byte x : data) b.append(String.format("%02x", x & 0xff));
        return b.toString();
    }

    static Map<String, Object> errorFields(String source, Throwable e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("source", source);
        m.put("code", null);
        m.put("name", e.getClass().getSimpleName());
        m.put("str", String.valueOf(e.getMessage()));
        m.put("fatal", isFatal(e));
        m.put("retriable", e instanceof RetriableException);
        return m;
    }

    static boolean isFatal(Throwable e) {
        return e instanceof FencedInstanceIdException || !(e instanceof KafkaException) || e instanceof IllegalStateException;
    }

    static Object[] flatten(Map<String, Object> m, Object... more) {
        List<Object> out = new ArrayList<>();
        for (Map.Entry<String, Object> e : m.entrySet()) {
            out.add(e.getKey());
            out.add(e.getValue());
        }
        Collections.addAll(out, more);
        return out.toArray();
    }

    // Commit the offsets of `uncommitted` for `which` (all when null); those committed leave it, those refused stay
    // for the next commit. True when the member was fenced (FencedInstanceIdException).
    static boolean commitOffsets(KafkaConsumer<byte[], byte[]> consumer,
                                 Map<TopicPartition, OffsetAndMetadata> uncommitted, Collection<TopicPartition> which) {
        Map<TopicPartition, OffsetAndMetadata> due = new HashMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : uncommitted.entrySet())
            if (which == null || which.contains(e.getKey())) due.put(e.getKey(), e.getValue());
        if (due.isEmpty()) return false;
        Map<String, Object> offsets = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : due.entrySet())
            offsets.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
        try {
            consumer.commitSync(due);
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : due.entrySet())
                uncommitted.remove(e.getKey(), e.getValue());
            emit("commit", "offsets", offsets);
        } catch (CommitFailedException e) {
            emit("commit_error", "offsets", offsets, "error", errorFields("commit", e));
        } catch (KafkaException e) {
            emit("commit_error", "offsets", offsets, "error", errorFields("commit", e));
            if (e instanceof FencedInstanceIdException) {
                emit("error", flatten(errorFields("commit", e)));
                return true;
            }
        }
        return false;
    }

    static List<Integer> parts(Collection<TopicPartition> tps) {
        List<Integer> ps = new ArrayList<>();
        for (TopicPartition tp : tps) ps.add(tp.partition());
        Collections.sort(ps);
        return ps;
    }

    static List<String> topics(Collection<TopicPartition> tps) {
        TreeSet<String> names = new TreeSet<>();
        for (TopicPartition tp : tps) names.add(tp.topic());
        return new ArrayList<>(names);
    }

    static String assignorClass(String assignor) {
        switch (assignor) {
            case "range": return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin": return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky": return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky": return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default: return assignor; // a class name
        }
    }

    public static void main(String[] argv) throws Exception {
        String bootstrap = null, topic = null, group = null, instanceId = null, clientId = null;
        String assignor = "range", commit = "sync";
        boolean regex = false;
        double maxRuntime = 150.0;
        Map<String, String> extra = new LinkedHashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            String v = i + 1 < argv.length ? argv[i + 1] : null;
            switch (a) {
                case "--bootstrap": bootstrap = v; i++; break;
                case "--topic": topic = v; i++; break;
                case "--group": group = v; i++; break;
                case "--instance-id": instanceId = v; i++; break;
                case "--client-id": clientId = v; i++; break;
                case "--assignor": assignor = v; i++; break;
                case "--name": name = v; i++; break;
                case "--max-runtime": maxRuntime = Double.parseDouble(v); i++; break;
                case "--commit": commit = v; i++; break;
                case "--regex": regex = true; break;
                case "--set": {
                    int eq = v.indexOf('=');
                    extra.put(v.substring(0, eq), v.substring(eq + 1));
                    i++;
                    break;
                }
                default:
                    System.err.println("unknown argument " + a);
                    System.exit(2);
            }
        }
        if (bootstrap == null || topic == null || group == null) {
            System.err.println("need --bootstrap, --topic and --group");
            System.exit(2);
        }

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId != null ? clientId : "java-" + name);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // The consumer group protocol (KIP-848, --set group.protocol=consumer) assigns on the server: the client
        // refuses a partition.assignment.strategy then (and session/heartbeat settings).
        final boolean kip848 = "consumer".equalsIgnoreCase(String.valueOf(extra.get("group.protocol")));
        if (!kip848) props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(assignor));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (instanceId != null && !instanceId.isEmpty()) props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceId);
        props.putAll(extra);
        final String protocol = kip848 || assignor.startsWith("cooperative") ? "COOPERATIVE" : "EAGER";

        LinkedBlockingQueue<String> commands = new LinkedBlockingQueue<>();
        Thread control = new Thread(() -> {
            try (java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in))) {
                String line;
                while ((line = in.readLine()) != null) {
                    line = line.trim();
                    if (line.equals("exit")) {
                        emit("exiting");
                        Runtime.getRuntime().halt(0);
                    }
                    if (!line.isEmpty()) commands.add(line);
                }
            } catch (java.io.IOException e) {
                // treat like end of input
            }
            commands.add("close");
        }, "control");
        control.setDaemon(true);

        emit("started", "pid", ProcessHandle.current().pid(), "client_version", AppInfoParser.getVersion());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        TreeSet<Integer> held = new TreeSet<>();
        // processed records' next offsets whose commit has not been acknowledged yet
        Map<TopicPartition, OffsetAndMetadata> uncommitted = new HashMap<>();
        final boolean commitSync = commit.equals("sync");
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> tps) {
                if (protocol.equals("EAGER")) held.clear();
                held.addAll(parts(tps));
                emit("assigned", "partitions", parts(tps), "held", new ArrayList<>(held), "protocol", protocol,
                     "member_id", consumer.groupMetadata().memberId(), "topics", topics(tps));
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> tps) {
                // The Java client calls this with an empty collection around some rebalances; only real changes count.
                if (tps.isEmpty()) return;
                if (commitSync) commitOffsets(consumer, uncommitted, tps);
                uncommitted.keySet().removeAll(tps);
                held.removeAll(parts(tps));
                emit("revoked", "partitions", parts(tps), "held", new ArrayList<>(held), "protocol", protocol);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> tps) {
                if (tps.isEmpty()) return;
                uncommitted.keySet().removeAll(tps);
                held.removeAll(parts(tps));
                emit("lost", "partitions", parts(tps), "held", new ArrayList<>(held), "protocol", protocol);
            }
        };
        if (regex) {
            // By reflection: kafka-clients 3.9, which this file also compiles against, has no SubscriptionPattern.
            Class<?> pattern = Class.forName("org.apache.kafka.clients.consumer.SubscriptionPattern");
            KafkaConsumer.class.getMethod("subscribe", pattern, ConsumerRebalanceListener.class)
                .invoke(consumer, pattern.getConstructor(String.class).newInstance(topic), listener);
        } else {
            consumer.subscribe(Collections.singletonList(topic), listener);
        }
        emit("subscribed");
        control.start();

        long deadline = System.nanoTime() + (long) (maxRuntime * 1e9);
        boolean fatal = false;
        try {
            while (!fatal) {
                String cmd = commands.poll();
                if (cmd != null && cmd.equals("close")) break;
                if (System.nanoTime() > deadline) {
                    emit("error", "source", "member", "code", null, "name", "MAX_RUNTIME", "str", "max runtime reached",
                         "fatal", false, "retriable", false);
                    break;
                }
                ConsumerRecords<byte[], byte[]> batch;
                try {
                    batch = consumer.poll(Duration.ofMillis(200));
                } catch (KafkaException e) {
                    fatal = isFatal(e) || !(e instanceof RetriableException);
                    emit("error", flatten(errorFields("poll", e)));
                    continue;
                }
                if (batch.isEmpty()) {
                    if (commitSync) fatal = commitOffsets(consumer, uncommitted, null); // one refused before
                    continue;
                }
                List<Object> recs = new ArrayList<>();
                Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    recs.add(java.util.Arrays.asList(r.partition(), r.offset(), hex(r.key())));
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
                emit("records", "recs", recs, "topics", topics(batch.partitions()));
                if (!commitSync) continue;
                uncommitted.putAll(next);
                fatal = commitOffsets(consumer, uncommitted, null);
            }
        } finally {
            emit("closing", "fatal", fatal);
            try {
                consumer.close(Duration.ofSeconds(10));
            } catch (Exception e) {
                emit("error", flatten(errorFields("close", e)));
            }
            emit("closed");
        }
        System.exit(0);
    }
}
