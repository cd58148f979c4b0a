// Command loadgen is the compiled twin of bench/loadgen.py's throughput mode, for bench/compare.py.
//
// Each of -conns connections becomes a member of its own group (FindCoordinator, JoinGroup with
// MEMBER_ID_REQUIRED, SyncGroup) and heartbeats every 2 s; once all are ready it prints {"ev":"ready"}, and on a
// "go" line from stdin every connection keeps -window identical pre-encoded requests in flight (Heartbeat, or an
// OffsetCommit of one partition with the member's generation) for -duration seconds, decoding one answer in 64
// to check its error codes, then prints {"ev":"result",...}. Requests are franz-go's kmsg types; the header and
// framing are written here.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

type conn struct {
	c    net.Conn
	r    *bufio.Reader
	corr int32
}

func frame(req kmsg.Request, corr int32) []byte {
	b := make([]byte, 4, 256)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, uint32(corr))
	b = binary.BigEndian.AppendUint16(b, 5)
	b = append(b, "bench"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func (c *conn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c.r, body)
	return body, err
}

func decode(req kmsg.Request, body []byte) (kmsg.Response, error) {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	off := 4
	if resp.IsFlexible() {
		off++ // empty tagged fields of response header v1 (only ApiVersions differs, not used here)
	}
	return resp, resp.ReadFrom(body[off:])
}

func (c *conn) call(req kmsg.Request) (kmsg.Response, error) {
	c.corr++
	if _, err := c.c.Write(frame(req, c.corr)); err != nil {
		return nil, err
	}
	body, err := c.readFrame()
	if err != nil {
		return nil, err
	}
	return decode(req, body)
}

func errorsOf(resp kmsg.Response) []int16 {
	var out []int16
	switch r := resp.(type) {
	case *kmsg.HeartbeatResponse:
		out = append(out, r.ErrorCode)
	case *kmsg.OffsetCommitResponse:
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				out = append(out, p.ErrorCode)
			}
		}
	}
	return out
}

type member struct {
	c          *conn
	group, id  string
	generation int32
}

var versions map[string]int16

func v(key int16) int16 { return versions[fmt.Sprint(key)] }

func subscription(topic string) []byte {
	s := &kmsg.ConsumerMemberMetadata{}
	s.Topics = []string{topic}
	return s.AppendTo(nil)
}

func setup(addr, group, topic string, sessionMs int32) (*member, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	nc.(*net.TCPConn).SetNoDelay(true)
	c := &conn{c: nc, r: bufio.NewReaderSize(nc, 64<<10)}
	m := &member{c: c, group: group}
	deadline := time.Now().Add(300 * time.Second)
	for {
		fc := kmsg.NewPtrFindCoordinatorRequest()
		fc.Version = v(10)
		fc.CoordinatorKey = group
		fc.CoordinatorKeys = []string{group}
		resp, err := c.call(fc)
		if err != nil {
			return nil, err
		}
		r := resp.(*kmsg.FindCoordinatorResponse)
		code, host, port := r.ErrorCode, r.Host, r.Port
		if len(r.Coordinators) > 0 {
			code, host, port = r.Coordinators[0].ErrorCode, r.Coordinators[0].Host, r.Coordinators[0].Port
		}
		if code == 0 {
			// Move to the coordinator, as clients do (this server's workers coordinate groups on different ports).
			target := net.JoinHostPort(host, fmt.Sprint(port))
			if target != nc.RemoteAddr().String() {
				nc2, err := net.Dial("tcp", target)
				if err != nil {
					return nil, err
				}
				nc.Close()
				nc = nc2
				nc.(*net.TCPConn).SetNoDelay(true)
				c = &conn{c: nc, r: bufio.NewReaderSize(nc, 64<<10)}
				m.c = c
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("FindCoordinator: error %d", code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for time.Now().Before(deadline) {
		jg := kmsg.NewPtrJoinGroupRequest()
		jg.Version = v(11)
		jg.Group, jg.SessionTimeoutMillis, jg.RebalanceTimeoutMillis = group, sessionMs, sessionMs
		jg.MemberID, jg.ProtocolType = m.id, "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", subscription(topic)
		jg.Protocols = []kmsg.JoinGroupRequestProtocol{p}
		resp, err := c.call(jg)
		if err != nil {
			return nil, err
		}
		jr := resp.(*kmsg.JoinGroupResponse)
		switch jr.ErrorCode {
		case 79: // MEMBER_ID_REQUIRED
			m.id = jr.MemberID
			continue
		case 14, 15, 16, 27: // loading, not available, not coordinator, rebalance in progress
			time.Sleep(100 * time.Millisecond)
			continue
		case 0:
		default:
			return nil, fmt.Errorf("JoinGroup: error %d", jr.ErrorCode)
		}
		m.id, m.generation = jr.MemberID, jr.Generation
		sg := kmsg.NewPtrSyncGroupRequest()
		sg.Version = v(14)
		sg.Group, sg.Generation, sg.MemberID = group, m.generation, m.id
		pt, pn := "consumer", "range"
		sg.ProtocolType, sg.Protocol = &pt, &pn
		if jr.LeaderID == jr.MemberID {
			for _, mm := range jr.Members {
				a := kmsg.NewSyncGroupRequestGroupAssignment()
				a.MemberID = mm.MemberID
				a.MemberAssignment = (&kmsg.ConsumerMemberAssignment{}).AppendTo(nil)
				sg.GroupAssignment = append(sg.GroupAssignment, a)
			}
		}
		resp, err = c.call(sg)
		if err != nil {
			return nil, err
		}
		if code := resp.(*kmsg.SyncGroupResponse).ErrorCode; code == 0 {
			return m, nil
		} else if code != 27 && code != 22 {
			return nil, fmt.Errorf("SyncGroup: error %d", code)
		}
	}
	return nil, fmt.Errorf("member of %s did not join", group)
}

func (m *member) heartbeat() kmsg.Request {
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version = v(12)
	hb.Group, hb.Generation, hb.MemberID = m.group, m.generation, m.id
	return hb
}

func (m *member) commit(topic string, offset int64) kmsg.Request {
	oc := kmsg.NewPtrOffsetCommitRequest()
	oc.Version = v(8)
	oc.Group, oc.Generation, oc.MemberID = m.group, m.generation, m.id
	oc.RetentionTimeMillis = -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset, p.LeaderEpoch = 0, offset, -1
	md := ""
	p.Metadata = &md
	t.Partitions = []kmsg.OffsetCommitRequestTopicPartition{p}
	oc.Topics = []kmsg.OffsetCommitRequestTopic{t}
	return oc
}

func say(ev string, fields map[string]any) {
	fields["ev"] = ev
	fields["t"] = float64(time.Now().UnixNano()) / 1e9
	b, _ := json.Marshal(fields)
	os.Stdout.Write(append(b, '\n'))
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func main() {
	bootstrap := flag.String("bootstrap", "", "HOST:PORT")
	vjson := flag.String("versions", "{}", `JSON {"api_key": version}`)
	conns := flag.Int("conns", 100, "connections (one member each)")
	op := flag.String("op", "heartbeat", "heartbeat or commit")
	window := flag.Int("window", 8, "requests in flight per connection")
	duration := flag.Float64("duration", 10, "seconds")
	prefix := flag.String("prefix", "bench", "group id prefix")
	topic := flag.String("topic", "bench-topic", "topic of the commits")
	sessionMs := flag.Int("session-ms", 30000, "session timeout")
	flag.Parse()
	if err := json.Unmarshal([]byte(*vjson), &versions); err != nil {
		say("failed", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
	members := make([]*member, *conns)
	var ready, done sync.WaitGroup
	var setupErr atomic.Value
	sem := make(chan struct{}, 200)
	goCh := make(chan struct{})
	var stop atomic.Bool
	var answers, errs, checked atomic.Int64
	var codesMu sync.Mutex
	codes := map[string]int{}
	for i := range members {
		ready.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			sem <- struct{}{}
			m, err := setup(*bootstrap, fmt.Sprintf("%s-%d", *prefix, i), *topic, int32(*sessionMs))
			<-sem
			if err != nil {
				setupErr.Store(err.Error())
				ready.Done()
				return
			}
			members[i] = m
			ready.Done()
			// Heartbeat every 2 s from the moment it joined until "go", so no member expires while others join.
			tick := time.NewTicker(2 * time.Second)
			defer tick.Stop()
		wait:
			for {
				select {
				case <-goCh:
					break wait
				case <-tick.C:
					m.c.call(m.heartbeat())
				}
			}
			var req kmsg.Request
			if *op == "heartbeat" {
				req = m.heartbeat()
			} else {
				req = m.commit(*topic, int64(1000+i))
			}
			f := frame(req, 1)
			burst := make([]byte, 0, len(f)**window)
			for k := 0; k < *window; k++ {
				burst = append(burst, f...)
			}
			if _, err := m.c.c.Write(burst); err != nil {
				return
			}
			var n int64
			for !stop.Load() {
				body, err := m.c.readFrame()
				if err != nil {
					return
				}
				n++
				if n%64 == 0 {
					checked.Add(1)
					if resp, err := decode(req, body); err == nil {
						for _, code := range errorsOf(resp) {
							if code != 0 {
								errs.Add(1)
								codesMu.Lock()
								codes[fmt.Sprint(code)]++
								codesMu.Unlock()
								break
							}
						}
					}
				}
				answers.Add(1)
				if _, err := m.c.c.Write(f); err != nil {
					return
				}
			}
		}(i)
	}
	ready.Wait()
	if e := setupErr.Load(); e != nil {
		say("failed", map[string]any{"error": e})
		os.Exit(1)
	}
	say("ready", map[string]any{"members": len(members)})
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "go" {
			break
		}
	}
	c0, t0 := cpuSeconds(), time.Now()
	close(goCh)
	time.Sleep(time.Duration(*duration * float64(time.Second)))
	got := answers.Load()
	elapsed := time.Since(t0).Seconds()
	c1 := cpuSeconds()
	stop.Store(true)
	codesMu.Lock()
	say("result", map[string]any{"answers": got, "seconds": elapsed, "errors": errs.Load(), "checked": checked.Load(),
		"error_codes": codes, "cpu_s": c1 - c0})
	codesMu.Unlock()
	for _, m := range members {
		m.c.c.Close()
	}
	done.Wait()
}
