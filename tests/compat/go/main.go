// franzgo: a franz-go (github.com/twmb/franz-go kgo + kadm) consumer-group member and admin tool for the
// compatibility tests. The Go counterpart of tests/e2e/groups/clients/ck_member.py and ck_admin.py; built by the
// tests with `go build` (module cache under .deps/go).
//
// Usage:
//
//	franzgo member --bootstrap HOST:PORT --topic T --group G --name NAME [--instance-id ID] [--client-id ID]
//	               [--balancer range|roundrobin|sticky|cooperative-sticky] [--server-side-balancer=true|false]
//	               [--session-timeout-ms N] [--heartbeat-interval-ms N] [--max-runtime SECONDS]
//	franzgo admin list|describe|offsets|delete --bootstrap HOST:PORT [--group G] [--client-id ID]
//	franzgo version
//
// member: events are JSON lines on stdout (the shapes of tests/e2e/groups/clients/_events.py):
// started (pid, client_version) / subscribed / assigned / revoked / lost / records / commit / commit_error /
// error / closing / closed / exiting. Commands on stdin, one a line: close (leave and exit 0), exit (exit at once,
// nothing closed, like a crash). End of stdin counts as close. Client logging goes to stderr.
//
// Consumption is exactly-once per partition ownership: BlockRebalanceOnPoll holds any rebalance until the records
// of a poll are committed (CommitRecords, synchronous) and AllowRebalance is called.
//
// --server-side-balancer (default true) opts into franz-go's KIP-848 consumer protocol. franz-go uses it only if
// the broker advertises ConsumerGroupHeartbeat v1+ (kgo.(*Client).supportsKIP848v1); this server does not, so the
// client must fall back to the classic JoinGroup/SyncGroup protocol: the tests check that it does.
//
// admin: one JSON object on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	outMu sync.Mutex
	name  = "go"
)

func emit(ev string, kv ...any) {
	m := map[string]any{"ev": ev, "t": float64(time.Now().UnixNano()) / 1e9, "member": name}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"ev": "error", "member": %q, "name": "JSON", "str": %q}`, name, err.Error()))
	}
	outMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	outMu.Unlock()
}

func franzVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/twmb/franz-go" {
			return strings.TrimPrefix(d.Version, "v")
		}
	}
	return "unknown"
}

func errFields(source string, err error, fatal bool) []any {
	var code any
	errName := fmt.Sprintf("%T", err)
	var ke *kerr.Error
	if errors.As(err, &ke) {
		code = ke.Code
		errName = ke.Message
	}
	return []any{"source", source, "code", code, "name", errName, "str", err.Error(), "fatal", fatal,
		"retriable", kerr.IsRetriable(err)}
}

func parts(m map[string][]int32, topic string) []int {
	out := []int{}
	for _, p := range m[topic] {
		out = append(out, int(p))
	}
	sort.Ints(out)
	return out
}

// topicsOf: the topics of an assignment (or of a batch of records), sorted.
func topicsOf(m map[string][]int32) []string {
	out := []string{}
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func sortedHeld(held map[int]bool) []int {
	out := []int{}
	for p := range held {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}

func balancer(name string) kgo.GroupBalancer {
	switch name {
	case "range":
		return kgo.RangeBalancer()
	case "roundrobin":
		return kgo.RoundRobinBalancer()
	case "sticky":
		return kgo.StickyBalancer()
	case "cooperative-sticky":
		return kgo.CooperativeStickyBalancer()
	}
	fmt.Fprintf(os.Stderr, "unknown balancer %q\n", name)
	os.Exit(2)
	return nil
}

func member(args []string) {
	fs := flag.NewFlagSet("member", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "HOST:PORT")
	topic := fs.String("topic", "", "topic (with --regex: a regular expression of topic names)")
	regex := fs.Bool("regex", false, "subscribe to the topics --topic matches (with KIP-848: the server resolves it)")
	group := fs.String("group", "", "group id")
	instanceID := fs.String("instance-id", "", "group.instance.id (static membership)")
	clientID := fs.String("client-id", "", "client id (default franz-go-NAME)")
	bal := fs.String("balancer", "range", "range|roundrobin|sticky|cooperative-sticky")
	serverSide := fs.Bool("server-side-balancer", true, "opt into KIP-848 where the broker supports it")
	sessionMs := fs.Int("session-timeout-ms", 20000, "session timeout")
	heartbeatMs := fs.Int("heartbeat-interval-ms", 1000, "heartbeat interval")
	maxRuntime := fs.Float64("max-runtime", 150, "seconds")
	fs.StringVar(&name, "name", "go", "member name")
	fs.Parse(args)
	if *clientID == "" {
		*clientID = "franz-go-" + name
	}
	protocol := "EAGER"
	if strings.HasPrefix(*bal, "cooperative") {
		protocol = "COOPERATIVE"
	}
	// With ServerSideBalancer the client uses KIP-848 where the server serves it: assignments then come and go
	// incrementally, whatever the balancer. Where it falls back to the classic protocol an eager balancer
	// revokes everything before each assignment, so counting incrementally is right either way.
	incremental := protocol == "COOPERATIVE" || *serverSide

	var mu sync.Mutex
	held := map[int]bool{}
	var cl *kgo.Client
	memberID := func() string {
		id, _ := cl.GroupMetadata()
		return id
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(*bootstrap),
		kgo.ClientID(*clientID),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.Balancers(balancer(*bal)),
		kgo.SessionTimeout(time.Duration(*sessionMs) * time.Millisecond),
		kgo.HeartbeatInterval(time.Duration(*heartbeatMs) * time.Millisecond),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			ps := parts(m, *topic)
			if !incremental {
				held = map[int]bool{}
			}
			for _, p := range ps {
				held[p] = true
			}
			emit("assigned", "partitions", ps, "held", sortedHeld(held), "protocol", protocol, "member_id", memberID(),
				"topics", topicsOf(m))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			ps := parts(m, *topic)
			if len(ps) == 0 {
				return // franz-go calls it with nothing around some rebalances; only real changes count
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ps {
				delete(held, p)
			}
			emit("revoked", "partitions", ps, "held", sortedHeld(held), "protocol", protocol)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			ps := parts(m, *topic)
			if len(ps) == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range ps {
				delete(held, p)
			}
			emit("lost", "partitions", ps, "held", sortedHeld(held), "protocol", protocol)
		}),
	}
	if *instanceID != "" {
		opts = append(opts, kgo.InstanceID(*instanceID))
	}
	if *regex {
		opts = append(opts, kgo.ConsumeRegex())
	}
	if *serverSide {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	emit("started", "pid", os.Getpid(), "client_version", franzVersion())
	var err error
	cl, err = kgo.NewClient(opts...)
	if err != nil {
		emit("error", errFields("new_client", err, true)...)
		os.Exit(1)
	}
	emit("subscribed")

	commands := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "exit" {
				emit("exiting")
				os.Exit(0)
			}
			if line != "" {
				commands <- line
			}
		}
		commands <- "close"
	}()

	deadline := time.Now().Add(time.Duration(*maxRuntime * float64(time.Second)))
	fatal := false
loop:
	for !fatal {
		select {
		case cmd := <-commands:
			if cmd == "close" {
				break loop
			}
		default:
		}
		if time.Now().After(deadline) {
			emit("error", "source", "member", "code", nil, "name", "MAX_RUNTIME", "str", "max runtime reached",
				"fatal", false, "retriable", false)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fetches := cl.PollRecords(ctx, 500)
		cancel()
		for _, fe := range fetches.Errors() {
			if errors.Is(fe.Err, context.DeadlineExceeded) || errors.Is(fe.Err, context.Canceled) {
				continue
			}
			// franz-go reports a FENCED_INSTANCE_ID from JoinGroup/SyncGroup/Heartbeat here and keeps retrying
			// the join with backoff; like the Java consumer (FencedInstanceIdException), this member treats it
			// as fatal and closes.
			isFatal := errors.Is(fe.Err, kerr.FencedInstanceID)
			emit("error", append(errFields("poll", fe.Err, isFatal), "partition", fe.Partition)...)
			fatal = fatal || isFatal
		}
		recs := fetches.Records()
		if len(recs) > 0 && !fatal {
			out := make([][]any, 0, len(recs))
			next := map[string]int64{}
			seen := map[string][]int32{}
			for _, r := range recs {
				seen[r.Topic] = nil
				var key any
				if r.Key != nil {
					key = hex.EncodeToString(r.Key)
				}
				out = append(out, []any{r.Partition, r.Offset, key})
				next[fmt.Sprint(r.Partition)] = r.Offset + 1
			}
			emit("records", "recs", out, "topics", topicsOf(seen))
			cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := cl.CommitRecords(cctx, recs...)
			ccancel()
			if err != nil {
				isFatal := errors.Is(err, kerr.FencedInstanceID)
				emit("commit_error", "offsets", next, "error", fieldsMap(errFields("commit", err, isFatal)))
				if isFatal {
					emit("error", errFields("commit", err, true)...)
					fatal = true
				}
			} else {
				emit("commit", "offsets", next)
			}
		}
		cl.AllowRebalance()
	}
	emit("closing", "fatal", fatal)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	// LeaveGroup for a dynamic member; a static member (InstanceID) sends none (KIP-345), as in Kafka's client.
	if err := cl.LeaveGroupContext(cctx); err != nil {
		emit("error", errFields("close", err, false)...)
	}
	ccancel()
	cl.Close()
	emit("closed")
	os.Exit(0)
}

func fieldsMap(kv []any) map[string]any {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

func errObj(err error) any {
	if err == nil {
		return nil
	}
	return fieldsMap(errFields("admin", err, false))
}

func admin(args []string) {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "admin needs a command: list|describe|offsets|delete")
		os.Exit(2)
	}
	cmd := args[0]
	fs := flag.NewFlagSet("admin", flag.ExitOnError)
	bootstrap := fs.String("bootstrap", "", "HOST:PORT")
	group := fs.String("group", "", "group id")
	clientID := fs.String("client-id", "franz-go-admin", "client id")
	fs.Parse(args[1:])
	cl, err := kgo.NewClient(kgo.SeedBrokers(*bootstrap), kgo.ClientID(*clientID))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]any{"command": cmd, "client_version": franzVersion()}
	switch cmd {
	case "list":
		listed, err := adm.ListGroups(ctx)
		out["error"] = errObj(err)
		groups := []map[string]any{}
		for _, g := range listed.Sorted() {
			groups = append(groups, map[string]any{"group_id": g.Group, "state": g.State,
				"protocol_type": g.ProtocolType, "coordinator": g.Coordinator})
		}
		out["groups"] = groups
	case "describe":
		// As Kafka's Admin client: ConsumerGroupDescribe (KIP-848) first, DescribeGroups for a classic group.
		if cg, cerr := adm.DescribeConsumerGroups(ctx, *group); cerr == nil {
			if d, ok := cg[*group]; ok && d.Err == nil {
				out["error"] = nil
				out["group_error"] = nil
				out["state"] = d.State
				out["protocol_type"] = "consumer"
				out["protocol"] = d.AssignorName
				out["type"] = "consumer"
				members := []map[string]any{}
				for _, m := range d.Members {
					assigned := [][]any{}
					for _, tp := range m.Assignment.Sorted() {
						for _, p := range tp.Partitions {
							assigned = append(assigned, []any{tp.Topic, p})
						}
					}
					members = append(members, map[string]any{"member_id": m.MemberID, "instance_id": m.InstanceID,
						"client_id": m.ClientID, "host": m.ClientHost, "assignment": assigned})
				}
				sort.Slice(members, func(i, j int) bool {
					return members[i]["client_id"].(string) < members[j]["client_id"].(string)
				})
				out["members"] = members
				break
			}
		}
		described, err := adm.DescribeGroups(ctx, *group)
		out["error"] = errObj(err)
		d, ok := described[*group]
		if ok {
			out["group_error"] = errObj(d.Err)
			out["state"] = d.State
			out["protocol_type"] = d.ProtocolType
			out["protocol"] = d.Protocol
			out["coordinator"] = map[string]any{"node_id": d.Coordinator.NodeID, "host": d.Coordinator.Host,
				"port": d.Coordinator.Port}
			members := []map[string]any{}
			for _, m := range d.Members {
				assigned := [][]any{}
				if c, ok := m.Assigned.AsConsumer(); ok {
					for _, t := range c.Topics {
						ps := append([]int32(nil), t.Partitions...)
						sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
						for _, p := range ps {
							assigned = append(assigned, []any{t.Topic, p})
						}
					}
				}
				members = append(members, map[string]any{"member_id": m.MemberID, "instance_id": m.InstanceID,
					"client_id": m.ClientID, "host": m.ClientHost, "assignment": assigned})
			}
			sort.Slice(members, func(i, j int) bool {
				return members[i]["client_id"].(string) < members[j]["client_id"].(string)
			})
			out["members"] = members
		}
	case "offsets":
		resp, err := adm.FetchOffsets(ctx, *group)
		out["error"] = errObj(err)
		offsets := map[string]int64{}
		if err == nil {
			out["group_error"] = errObj(resp.Error())
			resp.Each(func(o kadm.OffsetResponse) {
				if o.Err == nil {
					offsets[fmt.Sprintf("%s:%d", o.Topic, o.Partition)] = o.At
				}
			})
		}
		out["offsets"] = offsets
	case "delete":
		resp, err := adm.DeleteGroups(ctx, *group)
		out["error"] = errObj(err)
		if r, ok := resp[*group]; ok {
			out["group_error"] = errObj(r.Err)
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown admin command %q\n", cmd)
		os.Exit(2)
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: franzgo member|admin|version ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "member":
		member(os.Args[2:])
	case "admin":
		admin(os.Args[2:])
	case "version":
		fmt.Println(franzVersion())
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}
