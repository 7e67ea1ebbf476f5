// kafkajs (2.2.4, unchanged) against a tidelog cluster: an admin round, an idempotent acks=-1
// producer, a consumer group that rebalances when a second member joins, transactions (with
// sendOffsets and a fenced zombie) read by read_committed and read_uncommitted consumers,
// and a cleanup round (deleteTopicRecords, deleteGroups, deleteTopics).
//
//   node scenario.mjs --bootstrap HOST:PORT,... --admin-topic A --group-topic G --txn-topic T
//
// Prints one JSON object on stdout: a key per step ("admin", "produce", "group",
// "transaction", "cleanup"), each either the step's findings or {"error": ..., "type": ...}
// when kafkajs threw. A failed step does not stop the later ones. kafkajs logs (WARN and up)
// go to stderr, one JSON line each. tests/integration/cluster/test_kafkajs.py runs this and
// asserts on every step.

import { parseArgs } from 'node:util'
import { setTimeout as sleep } from 'node:timers/promises'
import kafkajs from 'kafkajs'

// kafkajs is CommonJS: its names come from the default export.
const { Kafka, logLevel, Partitioners, ConfigResourceTypes } = kafkajs

const { values: args } = parseArgs({
  options: {
    bootstrap: { type: 'string' },
    'admin-topic': { type: 'string' },
    'group-topic': { type: 'string' },
    'txn-topic': { type: 'string' },
  },
})
for (const name of ['bootstrap', 'admin-topic', 'group-topic', 'txn-topic']) {
  if (!args[name]) {
    process.stderr.write(`scenario.mjs: --${name} is required\n`)
    process.exit(2)
  }
}

const GROUP_PARTITIONS = 4
const TXN_PARTITIONS = 2
const BATCH = 200 // records per produce round in the group step
const PER_TXN = 20 // records per transaction
const STEP_TIMEOUT_MS = 90_000
// kafkajs warns when an idempotent producer's retries are limited (its EoS needs them).
const IDEMPOTENT_RETRY = { initialRetryTime: 200, retries: Number.MAX_SAFE_INTEGER, maxRetryTime: 2_000 }

const stderrLogger = () => ({ namespace, level, label, log }) => {
  process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
}

const kafka = new Kafka({
  clientId: 'tidelog-kafkajs-scenario',
  brokers: args.bootstrap.split(','),
  logLevel: logLevel.WARN,
  logCreator: stderrLogger,
  // Two cores shared by brokers, ZooKeeper and this: generous timeouts and retries.
  connectionTimeout: 10_000,
  requestTimeout: 30_000,
  retry: { initialRetryTime: 200, retries: 10 },
})

/** Open clients, disconnected at the end whatever happened. */
const open = []
const track = client => {
  open.push(client)
  return client
}

const until = async (predicate, timeoutMs, what) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await predicate()) return
    await sleep(100)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

const sum = offsets => offsets.reduce((acc, o) => acc + Number(o.offset ?? o.high), 0)

const admin = track(kafka.admin())

async function adminStep() {
  await admin.connect()
  const cluster = await admin.describeCluster()
  const created = await admin.createTopics({
    waitForLeaders: true,
    timeout: 30_000,
    topics: [
      {
        topic: args['admin-topic'],
        numPartitions: 3,
        replicationFactor: 3,
        configEntries: [{ name: 'retention.ms', value: '3600000' }],
      },
      { topic: args['group-topic'], numPartitions: GROUP_PARTITIONS, replicationFactor: 3 },
      { topic: args['txn-topic'], numPartitions: TXN_PARTITIONS, replicationFactor: 3 },
    ],
  })
  // kafkajs answers false (no error) when every topic already exists.
  const createdAgain = await admin.createTopics({
    topics: [{ topic: args['admin-topic'], numPartitions: 3, replicationFactor: 3 }],
  })
  let tooManyReplicas = null
  try {
    await admin.createTopics({
      topics: [{ topic: `${args['admin-topic']}-rf5`, numPartitions: 1, replicationFactor: 5 }],
    })
  } catch (e) {
    tooManyReplicas = (e.errors ?? [e]).map(err => err.type)
  }
  await admin.createPartitions({ topicPartitions: [{ topic: args['admin-topic'], count: 5 }] })
  const { topics } = await admin.fetchTopicMetadata({ topics: [args['admin-topic']] })
  const partitions = topics[0].partitions
    .map(p => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr }))
    .sort((a, b) => a.partition - b.partition)
  const described = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [
      {
        type: ConfigResourceTypes.TOPIC,
        name: args['admin-topic'],
        configNames: ['retention.ms', 'cleanup.policy'],
      },
    ],
  })
  const configs = Object.fromEntries(
    described.resources[0].configEntries.map(c => [c.configName, c.configValue])
  )
  await admin.alterConfigs({
    validateOnly: false,
    resources: [
      {
        type: ConfigResourceTypes.TOPIC,
        name: args['admin-topic'],
        configEntries: [{ name: 'retention.ms', value: '7200000' }],
      },
    ],
  })
  const altered = await admin.describeConfigs({
    includeSynonyms: false,
    resources: [
      { type: ConfigResourceTypes.TOPIC, name: args['admin-topic'], configNames: ['retention.ms'] },
    ],
  })
  const listed = await admin.listTopics()
  return {
    brokers: cluster.brokers.map(b => b.nodeId).sort(),
    controller: cluster.controller,
    created,
    createdAgain,
    tooManyReplicas,
    partitions,
    configs,
    alteredRetentionMs: altered.resources[0].configEntries[0].configValue,
    listed: [args['admin-topic'], args['group-topic'], args['txn-topic']].filter(t =>
      listed.includes(t)
    ),
  }
}

const producer = track(
  kafka.producer({
    idempotent: true,
    maxInFlightRequests: 1,
    retry: IDEMPOTENT_RETRY,
    createPartitioner: Partitioners.DefaultPartitioner,
  })
)

// Record i of a round has the create time base + i: a partition's batch holds every 4th.
const produceRound = async (round, base) => {
  const messages = []
  for (let i = 0; i < BATCH; i++) {
    messages.push({
      key: `k${i}`,
      value: `r${round}-${i}`,
      partition: i % GROUP_PARTITIONS,
      timestamp: String(base + i),
    })
  }
  return producer.send({ topic: args['group-topic'], acks: -1, messages })
}

async function produceStep() {
  await producer.connect()
  const base = Date.now() - 60_000
  const metadata = await produceRound(0, base)
  const offsets = await admin.fetchTopicOffsets(args['group-topic'])
  // The first record at or after base + 101 in each partition: record 104 (offset 26) in
  // partition 0, records 101, 102, 103 (offset 25) in partitions 1, 2, 3.
  const byTime = await admin.fetchTopicOffsetsByTimestamp(args['group-topic'], base + 101)
  return {
    byTimestamp: byTime
      .map(o => ({ partition: o.partition, offset: Number(o.offset) }))
      .sort((a, b) => a.partition - b.partition),
    acked: metadata
      .map(m => ({ partition: m.partition, errorCode: m.errorCode, baseOffset: m.baseOffset }))
      .sort((a, b) => a.partition - b.partition),
    highWatermarks: offsets
      .map(o => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }))
      .sort((a, b) => a.partition - b.partition),
  }
}

const groupId = `${args['group-topic']}-group`

/** A group member that records what it consumed and every assignment it was given. */
const member = name => {
  const consumer = track(
    kafka.consumer({
      groupId,
      sessionTimeout: 10_000,
      rebalanceTimeout: 20_000,
      heartbeatInterval: 300,
      maxWaitTimeInMs: 300,
    })
  )
  const seen = { name, consumer, records: [], assignments: [] }
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const assigned = payload.memberAssignment[args['group-topic']] ?? []
    seen.assignments.push([...assigned].sort((a, b) => a - b))
  })
  seen.start = async () => {
    await consumer.connect()
    await consumer.subscribe({ topics: [args['group-topic']], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen.records.push({ partition, offset: Number(message.offset), value: String(message.value) })
      },
    })
  }
  return seen
}

const committedTotal = async () =>
  sum((await admin.fetchOffsets({ groupId, topics: [args['group-topic']] }))[0].partitions)

async function groupStep() {
  const first = member('first')
  await first.start()
  await until(() => first.records.length >= BATCH, 60_000, `the first member to read ${BATCH}`)
  // Offsets are committed after each batch: wait for them so the second member's partitions
  // start where the first one stopped.
  await until(async () => (await committedTotal()) === BATCH, 30_000, 'the first commit')
  const second = member('second')
  await second.start()
  await until(
    () => second.assignments.length > 0 && first.assignments.length > 1,
    60_000,
    'both members to join the rebalanced generation'
  )
  await produceRound(1, Date.now())
  const total = () => first.records.length + second.records.length
  await until(() => total() >= 2 * BATCH, 60_000, `${2 * BATCH} records between the members`)
  await until(async () => (await committedTotal()) === 2 * BATCH, 30_000, 'the last commit')
  const [described] = (await admin.describeGroups([groupId])).groups
  const finding = {
    // Copies: the members go on rebalancing as they leave below.
    firstAssignments: [...first.assignments],
    secondAssignments: [...second.assignments],
    firstRecords: first.records.map(r => r.value),
    secondRecords: second.records.map(r => r.value),
    committed: await committedTotal(),
    describedState: described.state,
    describedMembers: described.members.length,
  }
  await first.consumer.disconnect()
  await second.consumer.disconnect()
  return finding
}

const transactionalId = `${args['txn-topic']}-txn`
const transactionalProducer = () =>
  track(
    kafka.producer({
      transactionalId,
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: 60_000,
      retry: IDEMPOTENT_RETRY,
      createPartitioner: Partitioners.DefaultPartitioner,
    })
  )
const txnProducer = transactionalProducer()

const txnValues = tag => Array.from({ length: PER_TXN }, (_, i) => `${tag}-${i}`)
const txnMessages = values => values.map((value, i) => ({ value, partition: i % TXN_PARTITIONS }))

const offsetsGroup = `${args['txn-topic']}-transform`

/** One transaction of PER_TXN records over every partition, which also commits ``offset``
 * for partition ``partition`` of the group topic in ``offsetsGroup`` (KIP-98's
 * consume-transform-produce: the offset counts only if the transaction commits). */
async function transaction(tag, commit, partition, offset) {
  const txn = await txnProducer.transaction()
  const values = txnValues(tag)
  try {
    await txn.send({ topic: args['txn-topic'], messages: txnMessages(values) })
    await txn.sendOffsets({
      consumerGroupId: offsetsGroup,
      topics: [{ topic: args['group-topic'], partitions: [{ partition, offset: String(offset) }] }],
    })
  } catch (e) {
    await txn.abort()
    throw e
  }
  if (commit) await txn.commit()
  else await txn.abort()
  return values
}

/** Every value a fresh group member with this isolation reads up to ``expected`` records
 * (the last committed transaction comes last in every partition, so seeing all of it means
 * the aborted one was passed over). */
async function readAll(readUncommitted, expected) {
  const consumer = track(
    kafka.consumer({
      groupId: `${args['txn-topic']}-${readUncommitted ? 'uncommitted' : 'committed'}`,
      readUncommitted,
      heartbeatInterval: 300,
      maxWaitTimeInMs: 300,
    })
  )
  const values = []
  await consumer.connect()
  await consumer.subscribe({ topics: [args['txn-topic']], fromBeginning: true })
  await consumer.run({ eachMessage: async ({ message }) => values.push(String(message.value)) })
  await until(() => values.length >= expected, 60_000, `${expected} records (${readUncommitted})`)
  await consumer.disconnect()
  return values
}

/** A second producer with the same transactional id fences the first mid-transaction
 * (KIP-98): its InitProducerId aborts the open transaction and bumps the epoch, so the
 * zombie's next send (Produce) and its commit (EndTxn) fail with INVALID_PRODUCER_EPOCH
 * (kafkajs speaks EndTxn v1, older than KIP-588's PRODUCER_FENCED). */
async function fence() {
  const zombie = txnValues('zombie')
  const zombieTxn = await txnProducer.transaction()
  await zombieTxn.send({ topic: args['txn-topic'], messages: txnMessages(zombie) })
  const successor = transactionalProducer()
  await successor.connect()
  const successorTxn = await successor.transaction()
  const refused = []
  for (const attempt of [
    () => zombieTxn.send({ topic: args['txn-topic'], messages: txnMessages(['late']) }),
    () => zombieTxn.commit(),
  ]) {
    try {
      await attempt()
      refused.push(null)
    } catch (e) {
      refused.push(e.type ?? e.name)
    }
  }
  const successorValues = txnValues('successor')
  await successorTxn.send({ topic: args['txn-topic'], messages: txnMessages(successorValues) })
  await successorTxn.commit()
  return { zombie, refused, successor: successorValues }
}

async function transactionStep() {
  await txnProducer.connect()
  const committed1 = await transaction('committed1', true, 0, 10)
  const aborted = await transaction('aborted', false, 1, 20)
  const committed2 = await transaction('committed2', true, 2, 30)
  const fenced = await fence()
  const committed = [...committed1, ...committed2, ...fenced.successor]
  const readCommitted = await readAll(false, committed.length)
  const readUncommitted = await readAll(true, committed.length + aborted.length + PER_TXN)
  const offsets = await admin.fetchTopicOffsets(args['txn-topic'])
  const [transformed] = await admin.fetchOffsets({
    groupId: offsetsGroup,
    topics: [args['group-topic']],
  })
  return {
    // Partition 1's offset was sent in the aborted transaction: -1, none committed.
    transformOffsets: transformed.partitions
      .map(p => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition),
    committed,
    aborted,
    zombie: fenced.zombie,
    zombieRefused: fenced.refused,
    readCommitted,
    readUncommitted,
    highWatermarks: offsets.map(o => Number(o.high)).sort((a, b) => a - b),
  }
}

async function cleanupStep() {
  // DeleteRecords: partition 0 of the group topic starts at offset 10 from now on. kafkajs
  // looks the leaders up in metadata it already holds: fetchTopicMetadata loads them.
  await admin.fetchTopicMetadata({ topics: [args['group-topic']] })
  await admin.deleteTopicRecords({
    topic: args['group-topic'],
    partitions: [{ partition: 0, offset: '10' }],
  })
  const groupTopicOffsets = await admin.fetchTopicOffsets(args['group-topic'])
  let deleteGroupsRefused = null
  try {
    await admin.deleteGroups([groupId, `${groupId}-never-joined`])
  } catch (e) {
    // kafkajs throws when any group failed, with every failed one.
    deleteGroupsRefused = (e.groups ?? []).map(g => ({ groupId: g.groupId, errorCode: g.errorCode }))
  }
  const groupsLeft = (await admin.listGroups()).groups.map(g => g.groupId)
  await admin.deleteTopics({ topics: [args['admin-topic']], timeout: 30_000 })
  await until(
    async () => !(await admin.listTopics()).includes(args['admin-topic']),
    30_000,
    'the deleted topic to leave the topic list'
  )
  return {
    lowWatermarks: groupTopicOffsets
      .map(o => ({ partition: o.partition, low: Number(o.low) }))
      .sort((a, b) => a.partition - b.partition),
    deleteGroupsRefused,
    groupDeleted: !groupsLeft.includes(groupId),
    remaining: (await admin.listTopics()).filter(t => t.startsWith(args['admin-topic'])),
  }
}

const withTimeout = (promise, what) =>
  Promise.race([
    promise,
    sleep(STEP_TIMEOUT_MS).then(() => {
      throw new Error(`step ${what} took longer than ${STEP_TIMEOUT_MS} ms`)
    }),
  ])

const results = {}
const steps = {
  admin: adminStep,
  produce: produceStep,
  group: groupStep,
  transaction: transactionStep,
  cleanup: cleanupStep,
}
for (const [name, step] of Object.entries(steps)) {
  const started = Date.now()
  try {
    results[name] = await withTimeout(step(), name)
  } catch (e) {
    results[name] = { error: `${e.name}: ${e.message}`, type: e.type ?? null }
  }
  results[name].ms = Date.now() - started
}
for (const client of open.reverse()) {
  try {
    await client.disconnect()
  } catch (e) {
    process.stderr.write(`disconnect: ${e}\n`)
  }
}
process.stdout.write(JSON.stringify(results) + '\n')
process.exit(0)
