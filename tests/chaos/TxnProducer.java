/*
 * One transactional producer of the transactional chaos workload on Kafka's Java client
 * (org.apache.kafka.clients.producer.KafkaProducer, kafka-clients 4.2.0): the twin of
 * txn_producer.py (confluent-kafka/librdkafka), with the same flags, the same transactions from
 * the same --seed/--producer/--first-txn (CPython's Mersenne Twister and its sample/randint/
 * shuffle/random algorithms, ported below), the same JSON event lines appended and flushed before
 * each call they announce, the same 30 s call bound and transaction.timeout.ms, the same clean
 * stop on SIGTERM (the current transaction finishes first). Kafka 4.x Java clients use
 * transaction version 2 (KIP-890: an epoch bump at every EndTxn, partitions added implicitly by
 * Produce) when the broker advertises the transaction.version feature, version 1 otherwise.
 *
 * Compiled and started by txn_java.py (docs/testing.md, "Transactions under faults"):
 *   java -cp <classes>:<kafka-clients and its jars> TxnProducer --bootstrap ... --topic ...
 *        --partitions N --producer N --first-txn T --events FILE [--seed S] [--abort-every N]
 *        [--rate R] [--transaction-timeout-ms MS] [--hold-ms MS]
 *   java ... TxnProducer --print-plans K <same flags>: what the first K transactions draw
 *        when no call fails (txn_producer.plan(), the flush coin, the hold) as JSON lines on
 *        stdout, then exit: test_txn_java.py compares them with txn_producer.py's.
 */
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TransactionCoordinatorFencedException;
import org.apache.kafka.common.errors.UnsupportedForMessageFormatException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnProducer {
    /** Bound on every transactional call (init, flush, commit, abort), in seconds: txn_producer.CALL_TIMEOUT_S. */
    static final double CALL_TIMEOUT_S = 30.0;

    static volatile boolean stopping = false;

    /** CPython's random.Random: MT19937 seeded from an int by init_by_array (Modules/_randommodule.c)
     * and Lib/random.py's algorithms over it, so the same seed draws the same transactions. */
    static final class PyRandom {
        private final int[] mt = new int[624];
        private int mti;

        PyRandom(long seed) {
            long n = Math.abs(seed);
            List<Integer> key = new ArrayList<>();
            do {                                   // 32-bit words, least significant first; 0 -> [0]
                key.add((int) (n & 0xffffffffL));
                n >>>= 32;
            } while (n != 0);
            initByArray(key);
        }

        private void initGenrand(int s) {
            mt[0] = s;
            for (mti = 1; mti < 624; mti++) {
                mt[mti] = 1812433253 * (mt[mti - 1] ^ (mt[mti - 1] >>> 30)) + mti;
            }
        }

        private void initByArray(List<Integer> key) {
            initGenrand(19650218);
            int i = 1, j = 0;
            for (int k = Math.max(624, key.size()); k > 0; k--) {
                mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >>> 30)) * 1664525)) + key.get(j) + j;
                i++;
                j++;
                if (i >= 624) { mt[0] = mt[623]; i = 1; }
                if (j >= key.size()) j = 0;
            }
            for (int k = 623; k > 0; k--) {
                mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >>> 30)) * 1566083941)) - i;
                i++;
                if (i >= 624) { mt[0] = mt[623]; i = 1; }
            }
            mt[0] = 0x80000000;
        }

        /** genrand_uint32, as an unsigned value. */
        long next32() {
            int y;
            if (mti >= 624) {
                int kk;
                for (kk = 0; kk < 624 - 397; kk++) {
                    y = (mt[kk] & 0x80000000) | (mt[kk + 1] & 0x7fffffff);
                    mt[kk] = mt[kk + 397] ^ (y >>> 1) ^ ((y & 1) != 0 ? 0x9908b0df : 0);
                }
                for (; kk < 623; kk++) {
                    y = (mt[kk] & 0x80000000) | (mt[kk + 1] & 0x7fffffff);
                    mt[kk] = mt[kk + (397 - 624)] ^ (y >>> 1) ^ ((y & 1) != 0 ? 0x9908b0df : 0);
                }
                y = (mt[623] & 0x80000000) | (mt[0] & 0x7fffffff);
                mt[623] = mt[396] ^ (y >>> 1) ^ ((y & 1) != 0 ? 0x9908b0df : 0);
                mti = 0;
            }
            y = mt[mti++];
            y ^= (y >>> 11);
            y ^= (y << 7) & 0x9d2c5680;
            y ^= (y << 15) & 0xefc60000;
            y ^= (y >>> 18);
            return y & 0xffffffffL;
        }

        /** getrandbits(k), 0 <= k <= 32. */
        long getrandbits(int k) {
            return k == 0 ? 0 : next32() >>> (32 - k);
        }

        /** _randbelow_with_getrandbits(n), n > 0. */
        int randbelow(int n) {
            int k = 32 - Integer.numberOfLeadingZeros(n);    // n.bit_length()
            long r = getrandbits(k);
            while (r >= n) r = getrandbits(k);
            return (int) r;
        }

        int randint(int a, int b) {
            return a + randbelow(b - a + 1);
        }

        double random() {
            long a = next32() >>> 5, b = next32() >>> 6;
            return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
        }

        double uniform(double a, double b) {
            return a + (b - a) * random();
        }

        /** sample(range(n), k) for k <= 5 (its small-set size is then 21). */
        List<Integer> sampleRange(int n, int k) {
            List<Integer> result = new ArrayList<>();
            if (n <= 21) {
                int[] pool = new int[n];
                for (int i = 0; i < n; i++) pool[i] = i;
                for (int i = 0; i < k; i++) {
                    int j = randbelow(n - i);
                    result.add(pool[j]);
                    pool[j] = pool[n - i - 1];
                }
            } else {
                Set<Integer> selected = new HashSet<>();
                for (int i = 0; i < k; i++) {
                    int j = randbelow(n);
                    while (selected.contains(j)) j = randbelow(n);
                    selected.add(j);
                    result.add(j);
                }
            }
            return result;
        }

        <T> void shuffle(List<T> x) {
            for (int i = x.size() - 1; i > 0; i--) {
                int j = randbelow(i + 1);
                T t = x.get(i);
                x.set(i, x.get(j));
                x.set(j, t);
            }
        }
    }

    /** One planned write: partition and value. */
    record Write(int partition, String value) {}

    record Plan(String intent, List<Write> writes) {}

    /** txn_producer.txn_value, as text. */
    static String txnValue(int producer, long txn, int write) {
        return String.format("t%03d-%08d-%03d", producer, txn, write);
    }

    /** txn_producer.plan: 1 to 3 partitions, 1 to 4 values each, about one in abortEvery aborted. */
    static Plan plan(PyRandom rng, int producer, long txn, int partitions, int abortEvery) {
        List<Integer> chosen = rng.sampleRange(partitions, rng.randint(1, Math.min(3, partitions)));
        List<Write> writes = new ArrayList<>();
        for (int partition : chosen) {
            for (int n = rng.randint(1, 4); n > 0; n--) {
                writes.add(new Write(partition, txnValue(producer, txn, writes.size())));
            }
        }
        rng.shuffle(writes);
        String intent = abortEvery > 0 && rng.randbelow(abortEvery) == 0 ? "abort" : "commit";
        return new Plan(intent, writes);
    }

    // ---- JSON lines, formatted as Python's json.dumps (the parent greps '"outcome": "') ----

    static String jsonString(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20 || c > 0x7e && c != 0x7f) out.append(String.format("\\u%04x", (int) c));
                    else out.append(c);
            }
        }
        return out.append('"').toString();
    }

    static String json(Object value) {
        if (value == null) return "null";
        if (value instanceof String s) return jsonString(s);
        if (value instanceof Number || value instanceof Boolean) return value.toString();
        if (value instanceof Write w) return "[" + w.partition() + ", " + jsonString(w.value()) + "]";
        if (value instanceof List<?> list) {
            StringBuilder out = new StringBuilder("[");
            for (Object item : list) out.append(out.length() > 1 ? ", " : "").append(json(item));
            return out.append(']').toString();
        }
        throw new IllegalArgumentException("no JSON for " + value.getClass());
    }

    /** time.monotonic(): HotSpot's nanoTime is CLOCK_MONOTONIC on Linux, the clock of every other process. */
    static double monotonic() {
        return System.nanoTime() / 1e9;
    }

    /** The append-only JSON-lines report to the parent, flushed line by line. */
    static final class Events {
        private final Writer out;

        Events(Writer out) {
            this.out = out;
        }

        void emit(String ev, Object... fields) throws IOException {
            StringBuilder line = new StringBuilder("{\"ev\": ").append(jsonString(ev))
                    .append(", \"t\": ").append(json(monotonic()));
            for (int i = 0; i < fields.length; i += 2) {
                line.append(", ").append(jsonString((String) fields[i])).append(": ").append(json(fields[i + 1]));
            }
            out.write(line.append("}\n").toString());
            out.flush();
        }
    }

    // ---- the flags of txn_producer.py ----

    static final class Args {
        String bootstrap, topic, events;
        Integer partitions, producer;
        long firstTxn = 0, seed = 0;
        int abortEvery = 4, transactionTimeoutMs = 10000, holdMs = 30, printPlans = -1;
        double rate = 0.0;

        static Args parse(String[] argv) {
            Map<String, String> given = new LinkedHashMap<>();
            for (int i = 0; i < argv.length; i++) {
                String flag = argv[i], value;
                int eq = flag.indexOf('=');
                if (!flag.startsWith("--")) throw new IllegalArgumentException("unexpected argument " + flag);
                if (eq > 0) {
                    value = flag.substring(eq + 1);
                    flag = flag.substring(0, eq);
                } else {
                    if (i + 1 >= argv.length) throw new IllegalArgumentException(flag + " needs a value");
                    value = argv[++i];
                }
                given.put(flag, value);
            }
            Args a = new Args();
            for (Map.Entry<String, String> e : given.entrySet()) {
                String v = e.getValue();
                switch (e.getKey()) {
                    case "--bootstrap" -> a.bootstrap = v;
                    case "--topic" -> a.topic = v;
                    case "--partitions" -> a.partitions = Integer.parseInt(v);
                    case "--producer" -> a.producer = Integer.parseInt(v);
                    case "--first-txn" -> a.firstTxn = Long.parseLong(v);
                    case "--events" -> a.events = v;
                    case "--seed" -> a.seed = Long.parseLong(v);
                    case "--abort-every" -> a.abortEvery = Integer.parseInt(v);
                    case "--rate" -> a.rate = Double.parseDouble(v);
                    case "--transaction-timeout-ms" -> a.transactionTimeoutMs = Integer.parseInt(v);
                    case "--hold-ms" -> a.holdMs = Integer.parseInt(v);
                    case "--print-plans" -> a.printPlans = Integer.parseInt(v);
                    default -> throw new IllegalArgumentException("unknown flag " + e.getKey());
                }
            }
            if (a.partitions == null || a.producer == null) {
                throw new IllegalArgumentException("--partitions and --producer are required");
            }
            if (a.printPlans < 0 && (a.bootstrap == null || a.topic == null || a.events == null)) {
                throw new IllegalArgumentException("--bootstrap, --topic and --events are required");
            }
            return a;
        }
    }

    // ---- errors: librdkafka's fatal / retriable / txn_requires_abort, in the Java client's terms ----

    static String describe(Throwable e) {
        StringBuilder out = new StringBuilder(e.getClass().getSimpleName()).append(": ").append(e.getMessage());
        for (Throwable cause = e.getCause(); cause != null && cause != cause.getCause(); cause = cause.getCause()) {
            out.append(" (cause ").append(cause.getClass().getSimpleName()).append(": ")
               .append(cause.getMessage()).append(')');
        }
        return out.toString();
    }

    /** The producer instance cannot go on (KafkaProducer's javadoc: close it): fenced, out of
     * sequence, unauthorised, unsupported, or a state the transaction manager refuses. */
    static boolean fatal(Throwable e) {
        for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
            if (c instanceof ProducerFencedException || c instanceof InvalidProducerEpochException
                    || c instanceof TransactionCoordinatorFencedException || c instanceof OutOfOrderSequenceException
                    || c instanceof AuthorizationException || c instanceof UnsupportedVersionException
                    || c instanceof UnsupportedForMessageFormatException || c instanceof IllegalStateException) {
                return true;
            }
        }
        return false;
    }

    /** librdkafka's txn_requires_abort: an error inside the transaction that an abort recovers
     * from. Not a call that timed out (librdkafka: retriable, outcome unknown) nor a fatal one. */
    static boolean requiresAbort(RuntimeException e) {
        return !(e instanceof TimeoutException) && !fatal(e);
    }

    static void sleepS(double seconds) {
        try {
            Thread.sleep(Math.max(0L, (long) (seconds * 1000)));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** confluent-kafka's flush(timeout): wait (bounded) for the transaction's writes to be
     * acknowledged or failed; a failure surfaces at the commit, as it does with librdkafka. */
    static void flush(List<Future<RecordMetadata>> sent, double timeoutS) {
        long deadline = System.nanoTime() + (long) (timeoutS * 1e9);
        for (Future<RecordMetadata> future : sent) {
            long left = deadline - System.nanoTime();
            if (left <= 0) return;
            try {
                future.get(left, java.util.concurrent.TimeUnit.NANOSECONDS);
            } catch (ExecutionException e) {
                // the record failed: the transaction is abortable, the commit will say so
            } catch (java.util.concurrent.TimeoutException e) {
                return;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    static Properties config(Args args) {
        Properties p = new Properties();
        p.put("bootstrap.servers", args.bootstrap);
        p.put("transactional.id", "chaos-txn-" + args.producer);
        p.put("transaction.timeout.ms", Integer.toString(args.transactionTimeoutMs));
        p.put("linger.ms", "5");
        // librdkafka's socket.timeout.ms 10000 of txn_producer.py
        p.put("request.timeout.ms", "10000");
        // librdkafka bounds a transactional producer's messages by transaction.timeout.ms
        // (message.timeout.ms); the Java client needs at least linger.ms + request.timeout.ms
        p.put("delivery.timeout.ms", Integer.toString(Math.max(args.transactionTimeoutMs, 10005)));
        // the bound of initTransactions, send's metadata wait, commitTransaction and abortTransaction
        p.put("max.block.ms", Long.toString((long) (CALL_TIMEOUT_S * 1000)));
        p.put("client.id", "chaos-txn-" + args.producer + "-java");
        return p;
    }

    /** A producer instance with its transactions initialised: retried on the same instance while
     * the error is retriable, on a fresh one otherwise. null when asked to stop meanwhile. */
    static KafkaProducer<byte[], byte[]> newProducer(Properties config, Events events) throws IOException {
        while (!stopping) {
            KafkaProducer<byte[], byte[]> producer;
            try {
                producer = new KafkaProducer<>(config, new ByteArraySerializer(), new ByteArraySerializer());
            } catch (KafkaException e) {
                events.emit("init-failed", "error", describe(e));
                sleepS(0.5);
                continue;
            }
            while (!stopping) {
                try {
                    producer.initTransactions();
                    events.emit("init");
                    return producer;
                } catch (KafkaException | IllegalStateException e) {
                    events.emit("init-failed", "error", describe(e));
                    sleepS(0.5);
                    if (!(e instanceof RetriableException)) break;
                }
            }
            close(producer, 0);
        }
        return null;
    }

    static void close(KafkaProducer<byte[], byte[]> producer, double timeoutS) {
        try {
            producer.close(Duration.ofMillis((long) (timeoutS * 1000)));
        } catch (RuntimeException e) {
            System.err.println("close: " + describe(e));
        }
    }

    static int run(Args args) throws IOException {
        PyRandom rng = new PyRandom(args.seed * 1000003L + args.producer * 7919L + args.firstTxn);
        if (args.printPlans >= 0) {
            for (long txn = args.firstTxn; txn < args.firstTxn + args.printPlans; txn++) {
                Plan plan = plan(rng, args.producer, txn, args.partitions, args.abortEvery);
                boolean flush = rng.random() < 0.5;       // the draws of a transaction without errors
                double hold = args.holdMs > 0 ? rng.uniform(0, args.holdMs / 1000.0) : 0.0;
                System.out.println("{\"txn\": " + txn + ", \"intent\": " + jsonString(plan.intent())
                                   + ", \"writes\": " + json(plan.writes()) + ", \"flush\": " + flush
                                   + ", \"hold\": " + json(hold) + "}");
            }
            return 0;
        }
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), signal -> stopping = true);
        Properties config = config(args);
        try (Writer out = new OutputStreamWriter(new FileOutputStream(args.events, true), StandardCharsets.UTF_8)) {
            Events events = new Events(out);
            KafkaProducer<byte[], byte[]> producer = newProducer(config, events);
            long txn = args.firstTxn;
            double began = monotonic();
            while (!stopping && producer != null) {
                if (args.rate > 0) {
                    double due = began + (txn - args.firstTxn) / args.rate;
                    if (due > monotonic()) {
                        sleepS(Math.min(0.5, due - monotonic()));
                        continue;
                    }
                }
                Plan plan = plan(rng, args.producer, txn, args.partitions, args.abortEvery);
                String intent = plan.intent();
                events.emit("begin", "txn", txn, "intent", intent, "writes", plan.writes());
                String outcome = "unknown", error = null, call = null;
                try {
                    producer.beginTransaction();
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (Write w : plan.writes()) {
                        sent.add(producer.send(new ProducerRecord<>(args.topic, w.partition(), null,
                                                                    w.value().getBytes(StandardCharsets.UTF_8))));
                    }
                    if (rng.random() < 0.5) {              // half the transactions wait for their writes first
                        flush(sent, CALL_TIMEOUT_S);
                        events.emit("flushed", "txn", txn);
                    }
                    if (args.holdMs > 0) sleepS(rng.uniform(0, args.holdMs / 1000.0));
                    call = intent;
                    events.emit("end-call", "txn", txn, "call", intent);
                    if (intent.equals("commit")) {
                        producer.commitTransaction();
                        outcome = "committed";
                    } else {
                        producer.abortTransaction();
                        outcome = "aborted";
                    }
                } catch (KafkaException | IllegalStateException e) {
                    error = describe(e);
                    if (requiresAbort(e)) {
                        try {
                            if (!"abort".equals(call)) events.emit("end-call", "txn", txn, "call", "abort");
                            producer.abortTransaction();
                            outcome = "aborted";
                        } catch (KafkaException | IllegalStateException again) {
                            error += "; abort: " + describe(again);
                        }
                    }
                    if (outcome.equals("unknown")) {
                        // Fatal, timed out, or an abort that failed: the transaction's fate is the
                        // coordinator's (the next instance fences this one and ends it).
                        events.emit("end", "txn", txn, "outcome", outcome, "error", error, "call", call);
                        txn++;
                        close(producer, 0);
                        producer = newProducer(config, events);
                        continue;
                    }
                }
                events.emit("end", "txn", txn, "outcome", outcome, "error", error, "call", call);
                txn++;
            }
            if (producer != null) close(producer, CALL_TIMEOUT_S);     // flushes first, as txn_producer.py does
            events.emit("exit");
        }
        return 0;
    }

    public static void main(String[] argv) throws IOException {
        Args args;
        try {
            args = Args.parse(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("TxnProducer: " + e.getMessage());
            System.exit(2);
            return;
        }
        int status = run(args);
        System.out.flush();
        System.exit(status);
    }
}
