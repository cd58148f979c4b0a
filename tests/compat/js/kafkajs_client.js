// A KafkaJS consumer-group member and admin tool for the compatibility tests: the Node.js counterpart of
// tests/e2e/groups/clients/ck_member.py and ck_admin.py. node_modules is installed by the tests (npm ci).
//
//   node kafkajs_client.js member --bootstrap HOST:PORT --topic T --group G --name NAME [--client-id ID]
//        [--session-timeout-ms N] [--heartbeat-interval-ms N] [--max-runtime SECONDS]
//   node kafkajs_client.js admin list|describe|offsets|delete --bootstrap HOST:PORT [--group G] [--topic T]
//
// member: events are JSON lines on stdout (the shapes of tests/e2e/groups/clients/_events.py): started (pid,
// client_version) / subscribed / assigned / revoked / records / commit / commit_error / error / closing / closed /
// exiting. Commands on stdin: close (disconnect: LeaveGroup, exit 0), exit (exit at once). End of stdin = close.
// KafkaJS logging goes to stderr.
//
// KafkaJS has no rebalance callbacks: `assigned` is emitted from the GROUP_JOIN instrumentation event (after every
// JoinGroup + SyncGroup, with the whole assignment; KafkaJS's protocol is eager) and `revoked` (everything) from
// REBALANCING. It has no static membership (no group.instance.id: KIP-345 is not implemented in KafkaJS 2.x).
// Each batch's records are committed with commitOffsets (autoCommit off) before the next batch is processed.
'use strict'

const { Kafka, logLevel, AssignerProtocol } = require('kafkajs')
const { version } = require('kafkajs/package.json')
const readline = require('readline')

function parseArgs(argv) {
  const out = {}
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith('--')) throw new Error(`unexpected argument ${argv[i]}`)
    out[argv[i].slice(2)] = argv[i + 1]
    i++
  }
  return out
}

function stderrLogCreator() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`${new Date().toISOString()} ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

function errFields(source, e, fatal) {
  return {
    source,
    code: e && e.type ? e.type : null,
    name: (e && (e.type || e.name)) || 'Error',
    str: String(e && e.message),
    fatal,
    retriable: Boolean(e && e.retriable),
  }
}

async function member(args) {
  const name = args.name || 'js'
  const topic = args.topic
  const emit = (ev, fields = {}) => {
    process.stdout.write(JSON.stringify({ ev, t: Date.now() / 1000, member: name, ...fields }) + '\n')
  }
  const kafka = new Kafka({
    clientId: args['client-id'] || `kafkajs-${name}`,
    brokers: [args.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
    retry: { retries: 10 },
  })
  const consumer = kafka.consumer({
    groupId: args.group,
    sessionTimeout: Number(args['session-timeout-ms'] || 20000),
    heartbeatInterval: Number(args['heartbeat-interval-ms'] || 1000),
    maxWaitTimeInMs: 500,
  })
  let held = []
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    held = [...(payload.memberAssignment[topic] || [])].sort((a, b) => a - b)
    emit('assigned', { partitions: held, held, protocol: 'EAGER', member_id: payload.memberId,
                       leader: payload.isLeader, group_protocol: payload.groupProtocol })
  })
  consumer.on(consumer.events.REBALANCING, () => {
    if (held.length === 0) return
    const was = held
    held = []
    emit('revoked', { partitions: was, held, protocol: 'EAGER' })
  })
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    emit('error', { ...errFields('crash', payload.error, !payload.restart), restart: payload.restart })
  })

  emit('started', { pid: process.pid, client_version: version })
  let closing = false
  const close = async fatal => {
    if (closing) return
    closing = true
    emit('closing', { fatal })
    try {
      await consumer.disconnect() // LeaveGroup
    } catch (e) {
      emit('error', errFields('close', e, false))
    }
    emit('closed')
    process.exit(0)
  }

  const rl = readline.createInterface({ input: process.stdin })
  rl.on('line', line => {
    line = line.trim()
    if (line === 'exit') {
      emit('exiting')
      process.exit(0)
    }
    if (line === 'close') close(false)
  })
  rl.on('close', () => close(false))
  setTimeout(() => {
    emit('error', { source: 'member', code: null, name: 'MAX_RUNTIME', str: 'max runtime reached', fatal: false,
                    retriable: false })
    close(false)
  }, Number(args['max-runtime'] || 150) * 1000).unref()

  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  emit('subscribed')
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      if (!isRunning() || isStale() || batch.messages.length === 0) return
      const recs = batch.messages.map(m => [batch.partition, Number(m.offset), m.key ? m.key.toString('hex') : null])
      emit('records', { recs })
      const last = batch.messages[batch.messages.length - 1].offset
      const next = (BigInt(last) + 1n).toString()
      const offsets = { [String(batch.partition)]: Number(next) }
      try {
        await consumer.commitOffsets([{ topic: batch.topic, partition: batch.partition, offset: next }])
        emit('commit', { offsets })
      } catch (e) {
        emit('commit_error', { offsets, error: errFields('commit', e, false) })
        throw e // KafkaJS rejoins on a rebalance error and the batch is fetched again
      }
      resolveOffset(last)
      await heartbeat()
    },
  })
}

async function admin(cmd, args) {
  const kafka = new Kafka({
    clientId: args['client-id'] || 'kafkajs-admin',
    brokers: [args.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: stderrLogCreator,
  })
  const adm = kafka.admin()
  await adm.connect()
  const out = { command: cmd, client_version: version, error: null }
  try {
    if (cmd === 'list') {
      const { groups } = await adm.listGroups()
      out.groups = groups.map(g => ({ group_id: g.groupId, protocol_type: g.protocolType }))
        .sort((a, b) => (a.group_id < b.group_id ? -1 : 1))
    } else if (cmd === 'describe') {
      const { groups } = await adm.describeGroups([args.group])
      const g = groups[0]
      out.state = g.state
      out.protocol = g.protocol
      out.protocol_type = g.protocolType
      out.group_error = g.errorCode ? { code: g.errorCode } : null
      out.members = g.members.map(m => {
        const decoded = m.memberAssignment && m.memberAssignment.length
          ? AssignerProtocol.MemberAssignment.decode(m.memberAssignment) : null
        const assignment = []
        for (const [t, ps] of Object.entries((decoded && decoded.assignment) || {})) {
          for (const p of [...ps].sort((a, b) => a - b)) assignment.push([t, p])
        }
        return { member_id: m.memberId, client_id: m.clientId, host: m.clientHost, assignment }
      }).sort((a, b) => (a.client_id < b.client_id ? -1 : 1))
    } else if (cmd === 'offsets') {
      const res = await adm.fetchOffsets({ groupId: args.group, topics: [args.topic] })
      out.offsets = {}
      for (const t of res) {
        for (const p of t.partitions) {
          if (Number(p.offset) >= 0) out.offsets[`${t.topic}:${p.partition}`] = Number(p.offset)
        }
      }
    } else if (cmd === 'delete') {
      const res = await adm.deleteGroups([args.group])
      out.group_error = res[0].errorCode ? { code: res[0].errorCode } : null
    } else {
      throw new Error(`unknown admin command ${cmd}`)
    }
  } catch (e) {
    out.error = { name: e.name, type: e.type || null, str: String(e.message),
                  groups: e.groups ? e.groups.map(g => ({ group_id: g.groupId, code: g.errorCode,
                                                          type: g.error && g.error.type })) : undefined }
  }
  await adm.disconnect()
  process.stdout.write(JSON.stringify(out) + '\n')
}

async function main() {
  const [what, ...rest] = process.argv.slice(2)
  if (what === 'member') return member(parseArgs(rest))
  if (what === 'admin') return admin(rest[0], parseArgs(rest.slice(1)))
  if (what === 'version') return console.log(version)
  process.stderr.write('usage: kafkajs_client.js member|admin|version ...\n')
  process.exit(2)
}

main().catch(e => {
  process.stderr.write(`fatal: ${e && e.stack}\n`)
  process.exit(1)
})
