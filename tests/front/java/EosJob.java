// A transactional read-process-write job with the Java client (tests/front/test_front_transactions.py): reads
// INPUT in group GROUP, writes each record's value upper-cased to OUTPUT (same partition), and commits its input
// offsets in the same transaction with the consumer's group metadata (KIP-447). Exits after IDLE_MS without input
// and prints how many records it committed.
//
//   java -cp CLASSES:JARS/* EosJob BOOTSTRAP GROUP INPUT OUTPUT TRANSACTIONAL_ID IDLE_MS

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class EosJob {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], group = args[1], input = args[2], output = args[3], txid = args[4];
        long idleMs = Long.parseLong(args[5]);

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("session.timeout.ms", "6000");
        c.put("client.id", "java-eos-consumer");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txid);
        p.put("client.id", "java-eos-producer");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());

        long committed = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(input));
            long last = System.currentTimeMillis();
            while (System.currentTimeMillis() - last < idleMs) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                last = System.currentTimeMillis();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                Map<TopicPartition, Long> firsts = new HashMap<>();
                producer.beginTransaction();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    byte[] value = r.value().clone();
                    for (int i = 0; i < value.length; i++) {
                        if (value[i] >= 'a' && value[i] <= 'z') {
                            value[i] = (byte) (value[i] - 32);
                        }
                    }
                    producer.send(new ProducerRecord<>(output, r.partition(), r.key(), value));
                    TopicPartition tp = new TopicPartition(r.topic(), r.partition());
                    offsets.put(tp, new OffsetAndMetadata(r.offset() + 1));
                    firsts.putIfAbsent(tp, r.offset());
                }
                try {
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    producer.commitTransaction();
                    committed += records.count();
                } catch (ProducerFencedException | OutOfOrderSequenceException | AuthorizationException e) {
                    throw e;
                } catch (KafkaException e) {
                    System.out.println("transaction failed: " + e);
                    producer.abortTransaction();
                    for (Map.Entry<TopicPartition, Long> first : firsts.entrySet()) {
                        consumer.seek(first.getKey(), first.getValue());
                    }
                }
            }
        }
        System.out.println("committed " + committed);
    }
}
