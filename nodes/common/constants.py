"""Every default number in mqlab, in one place, with its unit in its name.

Two kinds live here:
  * format constants that never vary per run (record layout, file naming, unit sizes);
  * production defaults taken from RocketMQ 4.9, which
    `nodes.common.config` turns into tunable dataclass fields. Code reads tunables from
    config objects, never from this module directly.

The relationships between them are asserted at the bottom, so a change that breaks one
fails at import time rather than in a chaos run.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------
# Storage formats (RocketMQ 4.9's store layout)
# ---------------------------------------------------------------------------
RECORD_MAGIC = 0xDAA320A7  # MESSAGE_MAGIC_CODE (-626843481 as a Java int)
BLANK_MAGIC = 0xCBD43194  # BLANK_MAGIC_CODE: end-of-segment marker (-875286124)
END_FILE_MIN_BLANK_BYTES = 8  # a record must leave room for the 8-byte blank marker
SEGMENT_NAME_DIGITS = 20  # files are named by their start offset, zero-padded
CQ_UNIT_SIZE_BYTES = 20  # phys_offset 8 + size 4 + tag_hash 8
TOPIC_NAME_BYTES_MAX = 127  # the record stores the topic length in one signed byte
PROPERTIES_BYTES_MAX = 32_767  # the record stores the properties length as a Java short
PROPERTY_NAME_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

COMMITLOG_SEGMENT_BYTES = 1024 * 1024 * 1024  # mappedFileSizeCommitLog
CQ_UNITS_PER_FILE = 300_000  # mappedFileSizeConsumeQueue / 20
MESSAGE_BODY_BYTES_MAX = 4 * 1024 * 1024  # maxMessageSize: larger sends are MESSAGE_ILLEGAL
FLUSH_LEAST_PAGES = 4  # flushCommitLogLeastPages
OS_PAGE_BYTES = 4096
RECOVER_FILES_FROM_END = 3  # normal recovery starts at the third-last segment
CHECKPOINT_SAFETY_MS = 3_000  # abnormal recovery starts 3 s before the checkpoint
MEMORY_RATIO_PERCENT = 40  # accessMessageInMemoryMaxRatio: "in memory" = last 40% of RAM
CQ_HOLE_SIZE_MARK = 0x7FFFFFFF  # the size field of a hole unit: Integer.MAX_VALUE, as RocketMQ's fillPreBlank writes
METADATA_MAP_SIZE_BYTES = 1024**3  # LMDB address space reserved for the metadata; the file grows only as data does
# Full disks and retention (RocketMQ's DefaultMessageStore disk rules). Ratios are used / (used +
# available) of the filesystem holding the store path, rounded up to a whole percent.
DISK_MAX_USED_SPACE_RATIO = 0.75  # diskMaxUsedSpaceRatio: above it, expired segments are deleted
DISK_SPACE_CLEAN_FORCIBLY_RATIO = 0.85  # diskSpaceCleanForciblyRatio: above it, sealed segments of any age
DISK_SPACE_WARNING_LEVEL_RATIO = 0.90  # diskSpaceWarningLevelRatio: above it, puts are refused (disk full)
DISK_CHECK_INTERVAL_MS = 10_000  # the disk check's period (isSpaceFull) ...
DISK_CHECK_FIRST_MS = 1_000  # ... and its first run after start
CLEAN_RESOURCE_INTERVAL_MS = 10_000  # cleanResourceInterval: one retention pass ...
CLEAN_FIRST_DELAY_MS = 60_000  # ... the first 60 s after start
FILE_RESERVED_TIME_MS = 72 * 3_600_000  # fileReservedTime (72 h): a segment older than this is expired
# Blocks are allocated this far ahead of a segment's write position (posix_fallocate), so no
# write through a map meets a page the filesystem cannot back (SIGBUS), while a segment costs
# disk only as it fills (a default commitlog segment is 1 GiB).
SEGMENT_ALLOCATE_STEP_BYTES = 1024 * 1024
DISK_FULL_REFUSAL_LOG_EVERY = 50_000  # a full disk's refused puts are logged once per this many
DELETE_FILES_BATCH_MAX = 10  # DELETE_FILES_BATCH_MAX: segments one retention pass deletes at most
CHECKED_EXTENTS_MAX = 100_000  # ranges of read-checked records a store remembers (~7 MB) before starting over

# Pull batch limits (DefaultMessageStore#isTheBatchFull)
PULL_FILTER_SCAN_BYTES_MIN = 16_000  # maxFilterMessageCount floor, in CQ bytes
TRANSFER_BYTES_MAX_IN_MEMORY = 256 * 1024
TRANSFER_COUNT_MAX_IN_MEMORY = 32
TRANSFER_BYTES_MAX_ON_DISK = 64 * 1024
TRANSFER_COUNT_MAX_ON_DISK = 8
PULL_BATCH_COUNT_MAX = 1024  # pullBatchSize upper bound (checkConfig)

# ---------------------------------------------------------------------------
# Topics, groups, permissions
# ---------------------------------------------------------------------------
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_DEFAULT = PERM_READ | PERM_WRITE  # 6
# RocketMQ 5's topic attribute message.type: which messages a topic takes (a 4.x client ignores it)
TOPIC_MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION")
# CreateTopic{update}: "keep the stored perm" (mqadmin updateTopic on an existing topic)
TOPIC_PERM_KEEP = -1
NO_END_MS = 2**62  # a store-time range with no upper bound
TOPIC_MESSAGE_TYPE_DEFAULT = "NORMAL"  # what an unset type reads as
AUTO_CREATE_TOPIC_KEY = "TBW102"  # the template topic that lets producers find auto-creating brokers
BROKER_DEFAULT_TOPIC_QUEUE_NUMS = 8  # defaultTopicQueueNums on the broker
PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS = 4  # defaultTopicQueueNums on the producer
TOPIC_CONFIG_DEFAULT_QUEUE_NUMS = 16  # TopicConfig read/write queue count default
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
TOPIC_NAME_PATTERN = r"^[%|a-zA-Z0-9_-]+$"  # TopicValidator.VALID_PATTERN_STR (topics and groups)
GROUP_NAME_CHARS_MAX = 255  # Validators.CHARACTER_MAX_LENGTH: a consumer or producer group name
# Topics only the broker writes (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET): a client send is NO_PERMISSION.
# Any other topic starting with SYSTEM_TOPIC_PREFIX (any case) is refused too, except the trace
# topic, which RocketMQ's clients write their traces to.
SEND_FORBIDDEN_TOPICS = frozenset({
    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"})
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
QUEUE_NUMS_MAX = 1024  # queues one topic may have (CreateTopic's bound); a REAL_QID must lie below it
# Messages one send may carry. RocketMQ bounds a batch only by bytes (4 MiB of bodies); a request
# of one-byte entries holds ~3 M of them in 64 MiB, and 300,000 held the broker's event loop for
# 2.4 s. A batch is one atomic store append on the loop, ~50-120 us per message on a loaded
# 2-core machine, so the cap is what bounds that hold: 1024 (what the client coalesces,
# SEND_ASYNC_BATCH_COUNT_MAX, and RocketMQ's pull batch maximum) keeps it near 0.1 s, where
# 4096 measured ~0.5 s. 4 MiB over 1024 messages is 4 KiB each: batches of ordinary messages
# reach the byte limit first.
BATCH_MESSAGES_MAX = 1024
CLUSTER_CREDENTIAL_BYTES = 32  # random bytes of a cluster's control-plane secret (hex in the configs)
# A request above REQUEST_SCAN_BYTES_MIN has its top-level fields counted before it is parsed:
# parsing 8 MiB of empty repeated entries (4 M of them) holds the event loop ~1.6 s, and the
# count stops after the method's entry limit, so it costs at most that many steps.
REQUEST_SCAN_BYTES_MIN = 64 * 1024
REQUEST_ENTRIES_MAX = 4096  # repeated entries of one request or stream message (pulls, lock queues, ...)
REGISTER_TOPICS_MAX = 100_000  # topic configs in one broker registration
REJECT_LOG_INTERVAL_MS = 10_000  # a peer's rejected requests log at most one line per this (the rest are counted)
DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
DEFAULT_CLUSTER_NAME = "DefaultCluster"
MASTER_ID = 0

# Subscription group defaults (SubscriptionGroupConfig)
GROUP_RETRY_QUEUE_NUMS = 1
GROUP_RETRY_MAX_TIMES = 16
GROUP_RETRY_MAX_TIMES_LIMIT = 128  # the most an operator may set (`mqlab admin group update --retry-max-times`)
GROUP_WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1

# Message property names (MessageConst)
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_MIN_OFFSET = "MIN_OFFSET"
PROPERTY_MAX_OFFSET = "MAX_OFFSET"
# Beyond RocketMQ: a CRC over the whole record (RocketMQ's covers only the body), so damage to
# the queue id or queue offset fields is caught before a record is indexed in the wrong place.
PROPERTY_RECORD_CRC = "__RECORD_CRC32"
KEY_SEPARATOR = " "
# Workload user properties: a producer workload stamps each message with its sharding key and
# per-key sequence number (a decimal string), and consumers journal them, so the checker can
# judge per-key order.
PROPERTY_WORKLOAD_SHARDING_KEY = "MQLAB_SHARDING_KEY"
PROPERTY_WORKLOAD_SEQ = "MQLAB_SEQ"
# the chaos producer's digest of the body it sent: decimal zlib.crc32 (the `integrity` check)
PROPERTY_WORKLOAD_BODY_CRC32 = "BODY_CRC32"

# ---------------------------------------------------------------------------
# Timing defaults in ms (each becomes a Timing field; Timing.scaled() scales them all)
# ---------------------------------------------------------------------------
REGISTER_INTERVAL_MS = 30_000  # broker -> namesrv registration heartbeat
BROKER_EXPIRY_MS = 120_000  # namesrv forgets a broker after this much silence
BROKER_EXPIRY_SCAN_MS = 10_000  # scanNotActiveBroker period
ROUTE_POLL_MS = 30_000  # pollNameServerInterval
CLIENT_HEARTBEAT_MS = 30_000  # heartbeatBrokerInterval
CONSUMER_OFFSET_PERSIST_MS = 5_000  # flushConsumerOffsetInterval (broker) / persistConsumerOffsetInterval
FLUSH_COMMITLOG_MS = 500  # flushIntervalCommitLog
FLUSH_COMMITLOG_THOROUGH_MS = 10_000  # flushCommitLogThoroughInterval
FLUSH_CONSUME_QUEUE_MS = 1_000  # flushIntervalConsumeQueue
# flushDiskType: ASYNC_FLUSH answers a send once the record is in the page cache (a flush
# service syncs every FLUSH_COMMITLOG_MS); SYNC_FLUSH answers after the commitlog is fsync'd
# through the record (GroupCommitService).
FLUSH_DISK_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
SYNC_FLUSH_TIMEOUT_MS = 5_000  # syncFlushTimeout: past it a SYNC_FLUSH send answers FLUSH_DISK_TIMEOUT
FLUSHED_POSITIONS_FILE = "flushed.json"  # in the store dir: the positions the last fsync covered
LONG_POLL_SCAN_MS = 5_000  # PullRequestHoldService wait when longPollingEnable
SHORT_POLL_MS = 1_000  # shortPollingTimeMills
BROKER_SUSPEND_MAX_MS = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS: long-poll hold asked by consumers
CONSUMER_TIMEOUT_WHEN_SUSPEND_MS = 30_000  # RPC timeout of a long-polling pull
SEND_TIMEOUT_MS = 3_000  # sendMsgTimeout
RPC_TIMEOUT_MS = 3_000  # ordinary unary calls (route lookups, offset queries)
QUERY_OFFSET_TIMEOUT_MS = 5_000  # READ_FROM_STORE timeout
REGISTER_TIMEOUT_MS = 6_000  # registerBrokerTimeoutMills
TIMING_FLOOR_MS = 5  # no scaled timer goes below this

# Unscaled budgets: process start-up is Python imports + gRPC bind, not a RocketMQ timer.
NODE_START_BUDGET_MS = 30_000
NODE_STOP_GRACE_MS = 10_000

# ---------------------------------------------------------------------------
# Producer
# ---------------------------------------------------------------------------
SEND_RETRY_TIMES = 2  # retryTimesWhenSendFailed: 3 attempts in all
SEND_ASYNC_RETRY_TIMES = 2  # retryTimesWhenSendAsyncFailed
# Latency fault tolerance (MQFaultStrategy, sendLatencyFaultEnable; off by default as in RocketMQ):
# an attempt that took at least SEND_LATENCY_MAX_MS[i] keeps its broker out of queue selection for
# SEND_NOT_AVAILABLE_MS[i]; a failed attempt counts as SEND_ISOLATION_LATENCY_MS. The latencies are
# measured (never scaled: the machine is as fast at every time scale); the durations are timers,
# scaled through Timing.send_not_available_max_ms (the last entry).
SEND_LATENCY_FAULT_ENABLE = False
SEND_LATENCY_MAX_MS = (50, 100, 550, 1_000, 2_000, 3_000, 15_000)
SEND_NOT_AVAILABLE_MS = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
SEND_ISOLATION_LATENCY_MS = 30_000
# Messages submitted and not yet answered before send_async blocks (RocketMQ bounds async
# requests with a 65535-permit semaphore). send_async coalesces the messages submitted while a
# batch is in flight into the next batch, so a window this size leaves as a few large batches.
SEND_ASYNC_WINDOW_MAX = 1024
# Messages in one coalesced batch: with the byte cap below, 1 KiB messages fill a batch of about
# a thousand, where a call's fixed cost (most of it gRPC's and replication's per-message work
# on the brokers) is spread over many messages.
SEND_ASYNC_BATCH_COUNT_MAX = 1024
SEND_ASYNC_BATCH_BYTES_MAX = 1024 * 1024  # body bytes in one coalesced batch (the broker allows 4 MiB)
SEND_ASYNC_BATCHES_IN_FLIGHT_MAX = 4  # coalesced batches in flight per topic, each to its own queue

# ---------------------------------------------------------------------------
# RocketMQ 4.x remoting protocol (the listener beside gRPC on the name server and every broker)
# ---------------------------------------------------------------------------
REMOTING_FRAME_BYTES_MAX = 16 * 1024 * 1024  # NettyDecoder's FRAME_MAX_LENGTH default
REMOTING_VERSION = 399  # MQVersion of 4.9.x, written in every header we send
REMOTING_CLOSE_WAIT_MS = 2_000  # how long stopping the listener waits for its connections to close
# Java enum ordinals, as the C++ client writes a heartbeat's consumer enums (ali-ons writes the names)
REMOTING_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")  # ConsumeType
REMOTING_MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")  # MessageModel
REMOTING_CONSUME_FROM_WHERE = (  # ConsumeFromWhere, deprecated members included: they hold ordinals
    "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST", "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
# PullSysFlag bits of a PULL_MESSAGE header
REMOTING_PULL_FLAG_COMMIT_OFFSET = 1
REMOTING_PULL_FLAG_SUSPEND = 2
REMOTING_PULL_FLAG_SUBSCRIPTION = 4
# MessageSysFlag's COMPRESSED bit on a send: the real clients zlib-compress a body over 4 KiB
REMOTING_SYS_FLAG_COMPRESSED = 0x1
# what a Java broker writes into every send answer; clients read them for tracing only
REMOTING_MSG_REGION = "DefaultRegion"
REMOTING_TRACE_ON = "true"

# ---------------------------------------------------------------------------
# Process exit codes
# ---------------------------------------------------------------------------
EXIT_OK = 0
EXIT_CRASH = 70  # EX_SOFTWARE: a broken invariant of the node's own
EXIT_CONFIG = 78  # EX_CONFIG: the config file is unusable

# ---------------------------------------------------------------------------
# The allocator of a node process (glibc malloc, set at start: nodes.common.allocator)
# ---------------------------------------------------------------------------
# glibc serves an allocation of 128 KiB or more with a fresh mmap and unmaps it on free (the
# threshold then moves with the sizes freed), so every pull answer or replicated chunk of ~1 MiB
# costs page faults and zeroing in the kernel, and how much depends on the order of earlier
# frees. A fixed threshold above the largest in-memory transfer keeps such buffers in the
# reused heap; the trim threshold keeps a freed top of the heap for the next one.
MALLOC_MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
MALLOC_TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024

# ---------------------------------------------------------------------------
# Replication
# ---------------------------------------------------------------------------
# The most commitlog bytes in one replication chunk. RocketMQ's haTransferBatchSize is 32 KiB,
# but its frames ride one TCP stream that the slave reads 4 MiB at a time; a gRPC message
# costs a fixed ~50-100 us on each end (and one slave report each), which 32 KiB pieces pay
# eight times over. 1 MiB, as a batched pull answer: a batch of 1024 1 KiB messages measured
# ~15 % less slave CPU per message than with 256 KiB chunks.
HA_TRANSFER_BATCH_BYTES = 1024 * 1024
SLAVE_TIMEOUT_MS = 3_000  # slaveTimeout: how long SYNC_MASTER waits for a slave ack
SLAVE_FALL_BEHIND_BYTES_MAX = 256 * 1024 * 1024  # haSlaveFallbehindMax: beyond it, SLAVE_NOT_AVAILABLE
HA_HEARTBEAT_MS = 5_000  # haSendHeartbeatInterval: reports and empty chunks when idle
HA_HOUSEKEEPING_MS = 20_000  # haHousekeepingInterval: a silent replication stream is closed
# WriteSocketService waits up to 100 ms for new bytes when idle and is woken at once only for a
# SYNC_MASTER (whose senders wait for the slave): an ASYNC_MASTER's appends reach the stream within
# this, gathered into one chunk instead of one stream write on each side per message
HA_ASYNC_TRANSFER_WAIT_MS = 100
HA_RECONNECT_MIN_MS = 500  # first retry after a lost master (bounded, jittered, doubling)
HA_RECONNECT_MAX_MS = 5_000  # RocketMQ's HAClient waits 5 s after a failed connect
SLAVE_SYNC_INTERVAL_MS = 10_000  # SlaveSynchronize#syncAll period
SLAVE_SYNC_FIRST_MS = 3_000  # ... and its first run after start
HA_TAIL_CHECK_BYTES = 4_096  # the divergence guard compares this many bytes before the slave's end
# A SYNC_MASTER that lost its log tail (unclean start) holds writes until a slave gave it back,
# at most one registration period (the slave learns the master's address again from its own
# next registration) plus this many of the slave's longest reconnect periods
# (ha_reconnect_max_ms, jitter included: the slave retries within 1.5x of it).
HA_RESTORE_WAIT_RECONNECTS = 2
HA_RECONNECT_JITTER_MAX = 1.5  # a reconnect delay is backoff x [0.5, 1.5)
# fault switch replica-skip-chunk: the first record from this phys offset is never replicated
REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET = 16 * 1024
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER")  # a broker_id >= 1 is always a SLAVE

# ---------------------------------------------------------------------------
# Consumer tracking, retry, DLQ and delayed delivery
# ---------------------------------------------------------------------------
CONSUMER_CHANNEL_EXPIRY_MS = 120_000  # CHANNEL_EXPIRED_TIMEOUT: a consumer silent this long is dropped
CLIENT_HOUSEKEEPING_MS = 10_000  # ClientHousekeepingService#scanNotActiveChannel period
CONSUME_TYPE_PASSIVELY = "CONSUME_PASSIVELY"  # push consumer
CONSUME_TYPE_ACTIVELY = "CONSUME_ACTIVELY"  # pull consumer
MESSAGE_MODEL_CLUSTERING = "CLUSTERING"
MESSAGE_MODEL_BROADCASTING = "BROADCASTING"
# which protocol a consumer's connection speaks, as operator queries show it
PROTOCOL_GRPC = "grpc"
PROTOCOL_REMOTING = "remoting"
DLQ_NUMS_PER_GROUP = 1  # a group's %DLQ% topic has one queue
RETRY_DELAY_LEVEL_BASE = 3  # a send-back without a level retries at level 3 + reconsume times
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # delayed messages wait here, queue = level - 1
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # a delayed message for it is discarded on delivery
MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # messageDelayLevel
DELAY_LEVEL_UNIT_MS = 1_000  # one "s" of MESSAGE_DELAY_LEVEL; scaled with the other timers
SCHEDULE_FIRST_DELAY_MS = 1_000  # FIRST_DELAY_TIME: the per-level timers start this long after start-up
SCHEDULE_POLL_MS = 100  # DELAY_FOR_A_WHILE: a level is looked at again after this
SCHEDULE_ERROR_BACKOFF_MS = 10_000  # DELAY_FOR_A_PERIOD: a level that failed waits this long
DELAY_OFFSET_PERSIST_MS = 10_000  # flushDelayOffsetInterval
SCHEDULE_DELIVER_BATCH_MAX = 1_024  # due messages one level delivers per pass, so one pass never hogs the loop
# Message property names used by retries and delays (MessageConst)
PROPERTY_DELAY = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
SYS_FLAG_TRANSACTION_MASK = 0x0C  # MessageSysFlag: transaction type bits
SYS_FLAG_TRANSACTION_COMMIT = 0x08  # a committed transactional message is delayed like a plain one
# Transactional messages (TransactionalMessageServiceImpl, EndTransactionProcessor,
# TransactionalMessageCheckService; nodes/broker/transaction.py). A half message waits in
# TRANS_HALF_TOPIC queue 0; each resolution writes an op record to TRANS_OP_HALF_TOPIC queue 0.
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"  # half messages checked too often go here
TRANS_OP_REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG: the tag of every op record
TRANSACTION_TIMEOUT_MS = 6_000  # transactionTimeOut: a half message is first checked once this old
# transactionCheckInterval: RocketMQ 4.9's broker default (5.x brokers use 30 s); mqlab follows 4.9's broker
TRANSACTION_CHECK_INTERVAL_MS = 60_000
TRANSACTION_CHECK_MAX = 15  # transactionCheckMax: checks of one half message before it is discarded
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"  # "true" on a transactional send (and its half message)
PROPERTY_PRODUCER_GROUP = "PGROUP"  # the group whose producers are asked about an open half message
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_RESOLUTION = "TRAN_RESOLUTION"  # mqlab: COMMIT, ROLLBACK or DISCARD on an op record
SYS_FLAG_TRANSACTION_PREPARED = 0x04  # MessageSysFlag.TRANSACTION_PREPARED_TYPE
SYS_FLAG_TRANSACTION_ROLLBACK = 0x0C  # MessageSysFlag.TRANSACTION_ROLLBACK_TYPE
TRANSACTION_CHECKS_PER_PASS_MAX = 1_024  # checks one pass sends, so one pass never hogs the loop
TRANSACTION_RESOLUTIONS_KEPT = 4_096  # resolutions remembered past the cursor, to answer late ends by name

# ---------------------------------------------------------------------------
# Push consumer
# ---------------------------------------------------------------------------
REBALANCE_INTERVAL_MS = 20_000  # RebalanceService waitInterval: periodic rebalance (notifications come sooner)
PULL_DELAY_WHEN_EXCEPTION_MS = 1_000  # pullTimeDelayMillsWhenException (effective value since 4.6.0)
PULL_DELAY_WHEN_FLOW_CONTROL_MS = 50  # PULL_TIME_DELAY_MILLS_WHEN_CACHE_FLOW_CONTROL
PULL_OFFSET_FIX_DELAY_MS = 10_000  # OFFSET_ILLEGAL: the corrected offset is stored and the queue dropped after this
PULL_MAX_IDLE_MS = 120_000  # PULL_MAX_IDLE_TIME: a queue not pulled this long is re-created by rebalance
CONSUME_RESUBMIT_DELAY_MS = 5_000  # a message whose send-back failed is consumed again locally after this
CONSUME_TIMEOUT_MS = 15 * 60_000  # consumeTimeout: a message consuming longer is sent back (level 3)
CONSUMER_OFFSET_PERSIST_FIRST_MS = 10_000  # persistAllConsumerOffset first runs this long after start
PULL_BATCH_SIZE = 32  # pullBatchSize
CONSUME_THREAD_MIN = 20  # consumeThreadMin (= the pool size: consumeThreadMax has no effect)
CONSUME_MESSAGE_BATCH_MAX_SIZE = 1  # consumeMessageBatchMaxSize: messages per listener call
MAX_RECONSUME_TIMES_DEFAULT = 16  # maxReconsumeTimes -1 means 16 in concurrent mode
CONSUMER_SEND_BACK_TIMEOUT_MS = 5_000  # CONSUMER_SEND_MSG_BACK RPC deadline (a transport budget: unscaled)
CONSUMER_LIST_TIMEOUT_MS = 3_000  # GET_CONSUMER_LIST_BY_GROUP RPC deadline (unscaled)
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # the send-back fallback's producer group
CLIENT_INSTANCE_NAME_DEFAULT = "DEFAULT"  # replaced by pid#nanos in CLUSTERING (changeInstanceNameToPID)
ALLOCATE_STRATEGY_NAMES = ("AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH")  # what a consumer process config may name
CONSUME_FROM_WHERE_NAMES = ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP")
CONSUMER_WORKLOADS = ("ack", "fail", "fail_keys", "raise")  # the consumer process's listener behaviours
CONSUMER_AWAIT_TERMINATION_MS = 3_000  # a consumer process lets running listeners finish this long on SIGTERM
ROUTE_POLL_FIRST_MS = 10  # MQClientInstance#startScheduledTask: the first route refresh this long after start
CONSUMER_PULL_TIMEOUT_MS = 10_000  # DefaultMQPullConsumer consumerPullTimeoutMillis (a transport budget: unscaled)
# consumeTimestamp's default: this long before the consumer was built (a point in the message history, not a
# timer: unscaled, so a scaled run starts from the same messages)
CONSUME_TIMESTAMP_BACK_MS = 30 * 60_000
# Push consumer flow control
PULL_THRESHOLD_COUNT_PER_QUEUE = 1_000  # pullThresholdForQueue: cached messages per queue before pausing
PULL_THRESHOLD_SIZE_PER_QUEUE_MIB = 100  # pullThresholdSizeForQueue: cached body MiB per queue before pausing
PULL_THRESHOLD_OFF = -1  # topic-level thresholds are off unless set
PULL_THRESHOLD_COUNT_PER_TOPIC = PULL_THRESHOLD_OFF  # pullThresholdForTopic: split over the owned queues
PULL_THRESHOLD_SIZE_PER_TOPIC_MIB = PULL_THRESHOLD_OFF  # pullThresholdSizeForTopic: split likewise
CONSUME_CONCURRENTLY_SPAN_MAX = 2_000  # consumeConcurrentlyMaxSpan: one stuck message stops pulls this far ahead

# Valid ranges, inclusive (DefaultMQPushConsumerImpl#checkConfig).
PULL_THRESHOLD_COUNT_PER_QUEUE_RANGE = (1, 65_535)
PULL_THRESHOLD_COUNT_PER_TOPIC_RANGE = (1, 6_553_500)
PULL_THRESHOLD_SIZE_PER_QUEUE_MIB_RANGE = (1, 1_024)
PULL_THRESHOLD_SIZE_PER_TOPIC_MIB_RANGE = (1, 102_400)
CONSUME_CONCURRENTLY_SPAN_MAX_RANGE = (1, 65_535)

assert PULL_THRESHOLD_COUNT_PER_QUEUE_RANGE[0] <= PULL_THRESHOLD_COUNT_PER_QUEUE <= PULL_THRESHOLD_COUNT_PER_QUEUE_RANGE[1]
assert PULL_THRESHOLD_SIZE_PER_QUEUE_MIB_RANGE[0] <= PULL_THRESHOLD_SIZE_PER_QUEUE_MIB <= PULL_THRESHOLD_SIZE_PER_QUEUE_MIB_RANGE[1]
assert CONSUME_CONCURRENTLY_SPAN_MAX_RANGE[0] <= CONSUME_CONCURRENTLY_SPAN_MAX <= CONSUME_CONCURRENTLY_SPAN_MAX_RANGE[1]

# --- relationships -----------------------------------------------------------
assert REGISTER_INTERVAL_MS * 3 <= BROKER_EXPIRY_MS  # a broker survives two lost heartbeats
assert BROKER_EXPIRY_SCAN_MS < BROKER_EXPIRY_MS
assert BROKER_SUSPEND_MAX_MS < CONSUMER_TIMEOUT_WHEN_SUSPEND_MS  # a held pull answers before its RPC deadline
assert COMMITLOG_SEGMENT_BYTES > MESSAGE_BODY_BYTES_MAX * 2
assert TOPIC_NAME_BYTES_MAX < 128
assert TRANSFER_COUNT_MAX_ON_DISK <= TRANSFER_COUNT_MAX_IN_MEMORY
assert HA_HEARTBEAT_MS * 3 <= HA_HOUSEKEEPING_MS  # an idle but live stream is never closed
assert HA_RECONNECT_MIN_MS <= HA_RECONNECT_MAX_MS
assert CLIENT_HEARTBEAT_MS * 3 <= CONSUMER_CHANNEL_EXPIRY_MS  # a consumer survives two lost heartbeats
assert CLIENT_HOUSEKEEPING_MS < CONSUMER_CHANNEL_EXPIRY_MS
assert SCHEDULE_POLL_MS <= DELAY_LEVEL_UNIT_MS  # the shortest level (1s) is looked at in time
assert PULL_DELAY_WHEN_FLOW_CONTROL_MS < PULL_DELAY_WHEN_EXCEPTION_MS  # flow control retries sooner than errors
assert BROKER_SUSPEND_MAX_MS < PULL_MAX_IDLE_MS  # a long-polled queue is never taken for an idle one

# ---------------------------------------------------------------------------
# Orderly consumption and queue locks
# ---------------------------------------------------------------------------
BROKER_LOCK_LEASE_MS = 60_000  # RebalanceLockManager REBALANCE_LOCK_MAX_LIVE_TIME: a broker lock lives this long unrenewed
CLIENT_LOCK_LEASE_MS = 30_000  # ProcessQueue REBALANCE_LOCK_MAX_LIVE_TIME: the client stops consuming after this
LOCK_RENEW_INTERVAL_MS = 20_000  # REBALANCE_LOCK_INTERVAL: lockAll renews every owned queue this often
LOCK_RENEW_FIRST_MS = 1_000  # lockMQPeriodically's first run after start
UNLOCK_DELAY_MS = 20_000  # UNLOCK_DELAY_TIME_MILLS: a dropped queue with cached messages is unlocked this late
CONSUME_LOCK_TRY_MS = 1_000  # removeUnnecessaryMessageQueue waits this long for a running listener call
ORDERLY_CONSUME_MAX_CONTINUOUS_MS = 60_000  # MAX_TIME_CONSUME_CONTINUOUSLY: one consume request yields after this
SUSPEND_CURRENT_QUEUE_MS = 1_000  # suspendCurrentQueueTimeMillis: a suspended queue waits this long by default
SUSPEND_CURRENT_QUEUE_MIN_MS = 10  # submitConsumeRequestLater clamps every delay to [min, max]
SUSPEND_CURRENT_QUEUE_MAX_MS = 30_000
ORDERLY_RELOCK_FIRST_MS = 100  # a consume request that finds its queue unlocked tries to lock it after this
ORDERLY_RESUBMIT_MS = 10  # re-lock / resubmit delay inside a consume request (lock lost, time cap, lock regained)
ORDERLY_LOCK_FAILED_RETRY_MS = 3_000  # a consume request whose lock attempt failed comes back after this
BROKER_LOCK_EXPIRY_SCAN_MS = 5_000  # beyond RocketMQ: a scan that records (and forgets) expired broker locks
LOCK_BATCH_TIMEOUT_MS = 1_000  # LOCK_BATCH_MQ / UNLOCK_BATCH_MQ RPC deadline (a transport budget: unscaled)
ORDERLY_MAX_RECONSUME_TIMES_DEFAULT = 2**31 - 1  # maxReconsumeTimes -1 means Integer.MAX_VALUE for orderly

assert LOCK_RENEW_INTERVAL_MS < CLIENT_LOCK_LEASE_MS < BROKER_LOCK_LEASE_MS  # renew before the client gives up, before the broker does
assert SUSPEND_CURRENT_QUEUE_MIN_MS <= SUSPEND_CURRENT_QUEUE_MS <= SUSPEND_CURRENT_QUEUE_MAX_MS
# ---------------------------------------------------------------------------
# Fault switches (tests only): each turns one correctness rule off, so a chaos suite can prove
# it fails on a broken build. Set them with a node config's `fault_switches`.
# ---------------------------------------------------------------------------
FAULT_LOCK_NO_EXCLUSION = "lock-no-exclusion"
FAULT_RECOVERY_TRUST_CHECKPOINT = "recovery-trust-checkpoint"
FAULT_REPLICA_SKIP_CHUNK = "replica-skip-chunk"
FAULT_COMMIT_PULLED_OFFSET = "commit-pulled-offset"
FAULT_IGNORE_PULL_SUGGESTION = "ignore-pull-suggestion"
FAULT_SYNC_FLUSH_ACK_EARLY = "sync-flush-ack-early"
FAULT_RECOVERY_KEEP_TORN_TAIL = "recovery-keep-torn-tail"
FAULT_READ_SKIP_CRC = "read-skip-crc"
FAULT_LOCK_SLOW_TAKEOVER = "lock-slow-takeover"
FAULT_REDELIVER_CONSUMED_BATCH = "redeliver-consumed-batch"
FAULT_ORDERLY_TAKE_NEWEST = "orderly-take-newest"
FAULT_ACK_UNHANDED_REQUEST = "ack-unhanded-request"
FAULT_ACK_UNHANDED_EVERY = 50  # ack-unhanded-request: one consume request in this many is acknowledged unseen
FAULT_SLOW_TAKEOVER_LEASES = 3  # lock-slow-takeover: another client's lease counts as live this many leases
FAULT_REDELIVER_TIMES = 3  # redeliver-consumed-batch: a successful batch goes to the listener this many times more
FAULT_PULL_FLIP_BODY_BYTE = "pull-flip-body-byte"
FAULT_PRODUCER_LATENCY_FAULT_OFF = "producer-latency-fault-off"
FAULT_REBALANCE_IGNORE_RETURNED = "rebalance-ignore-returned-queues"
FAULT_SPARSE_SEGMENTS = "sparse-segments"
FAULT_IGNORE_DISK_FULL = "ignore-disk-full"
FAULT_POP_NEVER_REVIVE = "pop-never-revive"
FAULT_POP_ACCEPT_STALE_HANDLE = "pop-accept-stale-handle"
FAULT_POP_FIFO_NO_BLOCK = "pop-fifo-no-block"
# switches of an in-harness client (the chaos producer workload), not of a node process
PRODUCER_FAULT_SWITCHES: dict[str, str] = {
    FAULT_PRODUCER_LATENCY_FAULT_OFF: "a producer avoids a broker that failed or was slow: latency fault tolerance "
                                      "is off, every send goes round robin over the publish list",
}
BROKER_FAULT_SWITCHES: dict[str, str] = {
    FAULT_PULL_FLIP_BODY_BYTE: "a slave serves the bodies it stored: every body a slave answers a pull with has "
                               "its first byte inverted",
    FAULT_LOCK_NO_EXCLUSION: "queue-lock mutual exclusion: every lock request is granted, even over another "
                             "client's live lease",
    FAULT_RECOVERY_TRUST_CHECKPOINT: "no acked message lost by a kill: abnormal recovery cuts the commitlog at the "
                                     "checkpoint instead of scanning forward",
    FAULT_REPLICA_SKIP_CHUNK: "replicas converge: the master never sends one record (the first from "
                         "REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET) and resumes every slave past it, so the slave never catches up",
    FAULT_SYNC_FLUSH_ACK_EARLY: "SYNC_FLUSH loses no acked message on power loss: a send is answered before the "
                                "commitlog fsync it should wait for",
    FAULT_RECOVERY_KEEP_TORN_TAIL: "recovery never serves a torn tail: the garbled bytes after the last valid "
                                   "record are kept and dispatched as a record",
    FAULT_READ_SKIP_CRC: "a pull never serves a record that fails its checks: records are served unchecked",
    FAULT_SPARSE_SEGMENTS: "no write dies of SIGBUS: segments are created sparse (no fallocate), so a write "
                           "into a page a full filesystem cannot back kills the broker with SIGBUS",
    FAULT_IGNORE_DISK_FULL: "a full disk refuses puts with SERVICE_NOT_AVAILABLE: the disk guard is off, puts go "
                            "on until a segment cannot be allocated (ENOSPC, answered SYSTEM_ERROR)",
    FAULT_LOCK_SLOW_TAKEOVER: "timely takeover: a lapsed lease of another client is taken over only after "
                              f"{FAULT_SLOW_TAKEOVER_LEASES} leases",
    FAULT_POP_NEVER_REVIVE: "an unacknowledged POP hand-out comes back after its invisible time: the revive "
                            "pass never moves an expired non-FIFO hand-out",
    FAULT_POP_ACCEPT_STALE_HANDLE: "an ack names the current hand-out: an expired or superseded receipt handle of "
                                   "a message still in flight is accepted as if current, and one of a revived "
                                   "message is answered OK as if acknowledged",
    FAULT_POP_FIFO_NO_BLOCK: "one FIFO batch in flight per queue: a FIFO pop reads on past a batch still "
                             "invisible instead of waiting for it",
}
CONSUMER_FAULT_SWITCHES: dict[str, str] = {
    FAULT_ACK_UNHANDED_REQUEST: "every acknowledged message reached the listener: one concurrent consume request "
                                f"in {FAULT_ACK_UNHANDED_EVERY} is answered CONSUME_SUCCESS without the listener",
    FAULT_COMMIT_PULLED_OFFSET: "commit only consumed offsets: the offset store commits up to what was pulled, "
                                "ahead of processing",
    FAULT_IGNORE_PULL_SUGGESTION: "follow the broker's pull suggestion (cold reads from the slave): every pull "
                                  "goes to the master",
    FAULT_REDELIVER_CONSUMED_BATCH: "no needless redelivery: every successfully consumed batch is handed to the "
                                    f"listener {FAULT_REDELIVER_TIMES} more times",
    FAULT_ORDERLY_TAKE_NEWEST: "order per queue: an orderly consume request takes the newest cached messages of "
                               "its queue first",
    FAULT_REBALANCE_IGNORE_RETURNED: "rebalance follows the route: a queue that left the topic's route (its broker "
                                     "group expired) is never allocated again when it returns",
}
# ---------------------------------------------------------------------------
# Clock faults (harness/clockfault.py, nodes/common/clock_control.py): a node started with
# `clock_control` runs its lease and timer code on a SkewedClock read from CLOCK_CONTROL_FILE
# in its run dir; with CLOCK_CONTROL_WALL the harness also preloads its wall-clock shift library
# (harness/_wall_shift.c), which reads WALL_SHIFT_FILE, for wall-clock jumps.
# ---------------------------------------------------------------------------
CLOCK_CONTROL_RATE = "rate"  # clock_control: a SkewedClock only
CLOCK_CONTROL_WALL = "wall+rate"  # clock_control: a SkewedClock, and a shifted wall clock for jumps
CLOCK_CONTROL_MODES = ("", CLOCK_CONTROL_RATE, CLOCK_CONTROL_WALL)  # "": off (production)
CLOCK_CONTROL_FILE = "clock.json"  # {"rate": fake ms per real ms, "offset_ms": a step of our monotonic clock}
WALL_SHIFT_FILE = "wall_shift.rc"  # the wall clock's shift in signed seconds: "+0", "+30", "-3600", "+1.500"
WALL_SHIFT_FILE_ENV = "MQLAB_WALL_SHIFT_FILE"  # set (with the library preloaded) only on a shifted node
CLOCK_CONTROL_POLL_MS = 75  # real ms between two looks at the control file (control plane: unscaled)
WALL_STEP_REPORT_MS = 100  # a change of the faked-minus-real wall clock this large is recorded as a step
FAULT_LEASE_WALL_CLOCK = "lease-wall-clock"
FAULT_RENEW_GIVES_UP = "renew-gives-up"
BROKER_FAULT_SWITCHES[FAULT_LEASE_WALL_CLOCK] = (
    "lock leases ignore wall-clock steps: the queue lock table measures leases on the wall clock "
    "(as RocketMQ does), so a backward step keeps a dead holder's lock past its lease")
CONSUMER_FAULT_SWITCHES[FAULT_RENEW_GIVES_UP] = (
    "lock renewal retries at every interval: after one renewal call of a broker's queues fails or times "
    "out, the consumer never renews that broker's locks again, so its client leases run out")

# ---------------------------------------------------------------------------
# RocketMQ 5's gRPC MessagingService (nodes/broker/rmq5): the limits and settings Apache's proxy
# applies and advertises, so a 5.x client behaves against mqlab as against RocketMQ 5.
# ---------------------------------------------------------------------------
# a client with no call and no open stream this long is forgotten; not a Timing: a real 5.x client's
# 10 s heartbeat cannot be time-scaled, so neither is this
RMQ5_CLIENT_IDLE_FORGET_MS = 120_000
RMQ5_PRODUCER_MAX_ATTEMPTS = 3  # settings: a send's attempts in all
RMQ5_PRODUCER_BACKOFF_INITIAL_MS = 10  # settings: the producer's exponential backoff
RMQ5_PRODUCER_BACKOFF_MAX_MS = 1_000
RMQ5_PRODUCER_BACKOFF_MULTIPLIER = 2.0
RMQ5_LONG_POLLING_TIMEOUT_MS = 20_000  # settings: a consumer's long polling
RMQ5_RECEIVE_BATCH_MAX = 32  # settings: a receive's batch
# settings: a push consumer's redelivery backoff, attempt 2 onwards (the delay levels, real seconds)
RMQ5_CONSUMER_BACKOFF_MS = tuple(
    int(v[:-1]) * {"s": 1_000, "m": 60_000, "h": 3_600_000}[v[-1]] for v in MESSAGE_DELAY_LEVEL.split())
RMQ5_MESSAGE_GROUP_BYTES_MAX = 64  # a FIFO message's group (ILLEGAL_MESSAGE_GROUP past it)
RMQ5_USER_PROPERTIES_MAX = 128  # user properties per message (MESSAGE_PROPERTIES_TOO_LARGE past it)
RMQ5_PROPERTIES_BYTES_MAX = 16 * 1024  # user properties + tag + keys of one message
RMQ5_DELIVERY_AHEAD_MS_MAX = 86_400_000  # a delayed message is due at most a day ahead
RMQ5_PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # a FIFO message's group, stored as RocketMQ 5 stores it
# a receive's long poll, clamped as the proxy does (scaled by the broker's time_scale, so a scaled
# test can await 1 s; a client's whole-second await would otherwise hit the 5 s floor)
RMQ5_RECEIVE_POLL_MIN_MS = 5_000
RMQ5_RECEIVE_POLL_MAX_MS = 20_000
# room left between a long poll's end and the call's gRPC deadline (a transport budget: unscaled)
RMQ5_RECEIVE_DEADLINE_MARGIN_MS = 500
# the invisible time of an auto_renew receive (a PushConsumer's: it asks none), scaled like the floor
RMQ5_AUTO_RENEW_INVISIBLE_MS = 60_000
# auto-renew (the proxy's DefaultReceiptHandleManager): how often held messages are looked at
# (a Timing), how close to its invisible time's end one is renewed, for how long at most, and how
# soon the messages of a client that ended are visible again (all scaled by the time knob)
RMQ5_RENEW_SCAN_MS = 5_000
RMQ5_RENEW_AHEAD_MS = 10_000
RMQ5_RENEW_MAX_MS = 3 * 3_600_000
RMQ5_RENEW_RELEASE_MS = 1_000
RMQ5_RENEW_HELD_MAX = 100_000  # messages held for renewal at once; later ones just expire

# ---------------------------------------------------------------------------
# Message index (nodes/store/index_file.py, index_service.py): RocketMQ's IndexFile. Each file
# is a 40-byte header, HASH_SLOTS 4-byte slots and ENTRIES 20-byte entries. RocketMQ's
# maxHashSlotNum / maxIndexNum (5,000,000 / 20,000,000: a 420 MB file) are far too big for a
# test cluster; the defaults make a 42 MB file whose entry region is allocated as it fills.
# ---------------------------------------------------------------------------
INDEX_HEADER_BYTES = 40
INDEX_SLOT_BYTES = 4
INDEX_ENTRY_BYTES = 20
INDEX_HASH_SLOTS = 500_000  # store.index_hash_slots (RocketMQ maxHashSlotNum 5,000,000)
INDEX_ENTRIES_PER_FILE = 2_000_000  # store.index_entries_per_file (RocketMQ maxIndexNum 20,000,000)
INDEX_HASH_SLOTS_TEST = 64  # test-sized: collisions and full files within a few hundred messages
INDEX_ENTRIES_PER_FILE_TEST = 256
INDEX_HASH_SLOTS_MIN = 1
INDEX_ENTRIES_PER_FILE_MIN = 4
INDEX_KEY_SEPARATOR = "#"  # an index key is "topic#key" (RocketMQ's buildKey)
INDEX_DIR = "index"
INDEX_QUERY_MAX_DEFAULT = 32  # RocketMQ defaultQueryMaxNum: what a query without a count gets
INDEX_QUERY_MAX = 64  # RocketMQ maxMsgsNumBatch: the most messages one key query answers
INDEX_CHAIN_STEPS_MAX = 100_000  # a slot chain longer than this is a damaged file: the walk stops
INDEX_CATCH_UP_RUN_RECORDS = 4096  # records the index's own walk reads before writing their keys (bounds its memory)
INDEX_BODY_PREVIEW_BYTES = 256  # how much of a body a message lookup answer carries

# ---------------------------------------------------------------------------
# POP consumption (RocketMQ 5's PopMessageProcessor, AckMessageProcessor,
# ChangeInvisibleTimeProcessor, PopReviveService, ConsumerOrderInfoManager): nodes/broker/pop/
# ---------------------------------------------------------------------------
POP_REVIVE_INTERVAL_MS = 1_000  # reviveInterval: an expired pop is moved to the retry topic within this
POP_BATCH_MAX = 32  # the most messages one pop hands out (the proxy's and the broker's cap)
POP_INVISIBLE_MIN_MS = 10_000  # minInvisibleTimeMillsForRecv: a receive handler's floor (the engine takes any > 0)
POP_INVISIBLE_MAX_MS = 12 * 3_600_000  # maxInvisibleTimeMills: the longest invisible time a pop or a change takes
POP_POLLING_MAX = 1_024  # popPollingSize: pops held per topic at once; one more is answered POLLING_FULL
POP_POLL_MAX_MS = 20_000  # the longest long-poll a pop waits (the proxy clamps receives to 5..20 s)
POP_RETRY_FIRST_PERCENT = 20  # popFromRetryProbability: how often the retry topic is popped first
POP_RETRY_QUEUE_NUMS = 1  # a pop retry topic has one queue (RocketMQ revives into queue 0)
POP_RETRY_TOPIC_SEPARATOR = "_"  # %RETRY%<group>_<topic>: RocketMQ 5's retry topic v1 name
POP_HANDLE_VERSION = "p1"  # the first field of our receipt handles
POP_FIFO_KIND = "f"  # a handle's kind: a FIFO pop (redelivered in place, never through the retry topic)
POP_NORMAL_KIND = "n"  # a handle's kind: a message of the topic itself
POP_RETRY_KIND = "r"  # a handle's kind: a message of the group's retry topic for the topic
POP_SETTLED_REMEMBERED_MAX = 100_000  # settled handles remembered (to answer repeated acks); the oldest go first
POP_REVIVE_BATCH_MAX = 1_024  # expired pops one revive pass moves, so one pass never hogs the event loop
PROPERTY_POP_RETRY_GROUP = "POP_RETRY_GROUP"  # the pop group a revived copy belongs to (names can collide, see moves.py)
PROPERTY_POP_FIRST_POP_TIME = "1ST_POP_TIME"  # MessageConst.PROPERTY_FIRST_POP_TIME, set on the first revive
PROPERTY_DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"  # where a dead-lettered pop came from (RocketMQ 5)
PROPERTY_DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"

# ---------------------------------------------------------------------------
# The link proxies' request journal (harness/request_journal.py, harness/request_tap.py)
# ---------------------------------------------------------------------------
REQUEST_JOURNAL_FLUSH_MS = 200  # buffered lines reach the file this often (and at close): harness-side, unscaled
FAULT_OFFSET_COMMIT_DROP = "offset-commit-drop"
FAULT_OFFSET_COMMIT_DROP_EVERY = 2  # offset-commit-drop: one update in this many that would change a stored offset
BROKER_FAULT_SWITCHES[FAULT_OFFSET_COMMIT_DROP] = (
    "an offset commit answered success is stored: a master answers one UPDATE_CONSUMER_OFFSET in "
    f"{FAULT_OFFSET_COMMIT_DROP_EVERY} that would change the stored offset with success and drops it")
