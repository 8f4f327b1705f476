// Readiness probe for tools/kafka/kafka.sh:
//   java -cp '<jars>/*' WaitBrokers.java <bootstrap> <N> <timeout_s>
// Polls AdminClient describeCluster().nodes() until the cluster metadata lists exactly
// N brokers (registered and unfenced), or fails after timeout_s.
// Exit codes: 0 ready, 1 timeout, 2 usage.
// Prints one line on stdout when ready: "ready: N brokers [ids] after <ms> ms".

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.common.Node;

public class WaitBrokers {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: WaitBrokers <bootstrap> <N> <timeout_s>");
            System.exit(2);
        }
        String bootstrap = args[0];
        int want = Integer.parseInt(args[1]);
        long timeoutMs = (long) (Double.parseDouble(args[2]) * 1000);
        long start = System.nanoTime();
        long deadline = start + TimeUnit.MILLISECONDS.toNanos(timeoutMs);

        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "5000");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "100");
        p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");
        p.put(AdminClientConfig.RETRY_BACKOFF_MAX_MS_CONFIG, "500");
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "kafka-sh-wait");

        String last = "no answer yet";
        Admin admin = Admin.create(p);
        try {
            while (true) {
                long now = System.nanoTime();
                if (now - deadline >= 0) break;
                long left = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - now));
                int callMs = (int) Math.min(5000, left);
                try {
                    var res = admin.describeCluster(new DescribeClusterOptions().timeoutMs(callMs));
                    List<Node> nodes = List.copyOf(res.nodes().get(callMs + 500L, TimeUnit.MILLISECONDS));
                    String ids = nodes.stream().map(Node::id).sorted().map(String::valueOf)
                            .collect(Collectors.joining(","));
                    last = nodes.size() + " brokers [" + ids + "]";
                    if (nodes.size() == want) {
                        long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                        System.out.println("ready: " + last + " after " + ms + " ms");
                        return;
                    }
                } catch (Exception e) {
                    Throwable c = e.getCause() != null ? e.getCause() : e;
                    last = c.getClass().getSimpleName() + ": " + c.getMessage();
                }
                Thread.sleep(250);
            }
        } finally {
            admin.close(Duration.ofSeconds(2));
        }
        System.err.println("timeout after " + args[2] + " s waiting for " + want
                + " brokers at " + bootstrap + "; last: " + last);
        System.exit(1);
    }
}
