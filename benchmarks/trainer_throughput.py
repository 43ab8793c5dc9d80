"""Training throughput of the etj trainer, side by side with its baselines, on one model.

Three runs of the same CTR model and synthetic data (Zipf ids, batch 1024 per worker):

- ``single``: one process, no strategy, the trainer's own raw-TF training function in
  calls of 50 steps — the practical limit of this machine (calls of 400 were no faster:
  466k / 499k / 467k vs 508k / 438k / 510k examples/s, alternating);
- ``naive``: Keras 3 ``Embedding`` layers + ``fit`` (the approach the project started
  from; it reads whole tables every step);
- ``ps``: etj's ParameterServer trainer, chief + 2 workers + 2 ps as real processes on
  127.0.0.1 (``python -m etj_trainer``), tables sharded per the operator's plan, the job's
  ``stepsPerExecution`` left out as a user would (chunks sized by time; ``--spe N`` sets
  it; it was 50 here before 2026-11-26's last session).

Prints examples/s of each and ``ps/single=<ratio> ps/naive=<ratio>``. ``--quick`` keeps
the whole run within ~10 minutes here; ``--quick --sets 3`` is issue #23's measurement:
three comparisons in a row (``naive`` in the first only), each ratio, their median and
the load average as the last line. ``--large-table`` instead trains
and checkpoints a table over 2 GB (10M x 64 float32 with Adagrad, sharded over 4 ps).

``--dynamic`` runs the PS job with ``user_id`` and ``item_id`` as dynamic tables (as many
rows: 1,000 fallback rows + the rest as pool) against the hashed ones, alternating,
``--repeat`` times, and prints each median and ``dynamic/hashed`` (issue #22's goal: >= 0.7)
with the load average and each task's CPU-seconds per million examples. Measured
(``--dynamic --repeat 3 --seconds 30``, load 15-20): hashed 122,700, dynamic 57,677
examples/s, dynamic/hashed 0.47 (below the goal). CPU-seconds per million examples (one
more pair, load 10-12): hashed chief 0.2, ps 2.7 + 1.2, workers 3.3 + 3.2; dynamic chief
1.3, ps 5.9 + 3.4, workers 5.6 + 5.6. A model with a dynamic table took the plain
per-shard path, not ``models.fused``; each step also looks up every shard's index twice
(counting, then rows) and inserts its candidates there. One lookup per shard instead of
two (branch ``h22c``) did not change the CPU per example (one pair, load 7-8: dynamic ps
5.4 + 3.1 -> 5.5 + 3.2, workers 4.8 -> 5.0; ratio 0.53 vs 0.42): not adopted.

Branch ``h22d``: a dynamic table no longer puts its model on the plain path. Its index
shards map the distinct keys to rows, and the rows travel packed with the hashed tables'
(``models.fused``; the same math: ``tests/trainer/etj_trainer/models/test_dynamic_fused.py``). Measured
(``--dynamic --repeat 3 --seconds 30``, load 13-20, other helpers' jobs on the 2 cores):
hashed 163,701 / 139,375 / 108,328, dynamic 71,357 / 64,489 / 81,795 examples/s, medians
139,375 and 71,357: dynamic/hashed 0.51; CPU-seconds per million examples, dynamic:
chief 1.0-1.5, ps 4.8-5.1 + 2.4-2.6, workers 4.2-4.7 (was ps 5.9 + 3.4, workers 5.6).
Then the coordinator's pause every ``maintainEverySteps`` (100 here: every 2 chunks of 50,
all workers idle while it runs) ran one function per table and read every counter with
its own round trip (for a result nobody used); timed in the chief, it took 12 % of the
wall time (145 ms per pause). Now one call runs every table's pass and the stats are one
call. Measured the same way (load 12-16): hashed 146,024 / 124,071 / 146,286, dynamic
71,575 / 57,921 / 95,513 examples/s, medians 146,024 and 71,575: dynamic/hashed 0.49
(pairs 0.49, 0.47, 0.65); chief 0.7-1.4 CPU-seconds per million examples: within the
noise of this machine. Issue #22's goal (0.7) is not met.

What is left is per step, not per pause: per example the dynamic job spends about twice
the CPU of the hashed one (ps ~2.3x, workers ~1.7x). ``perf record -F 99`` for 20 s on ps 0
and worker 0 of each job (load ~12; the Adagrad row updates, proportional to examples,
scale the two): per example, ps 0 took ~2.3x the samples. The hash tables' own work
(``MutableHashTableOfScalars::Find``, ``std::_Hashtable``, ``ExportValues``) is ~7 % of
the dynamic ps's samples, ~12 % of its excess; the rest of the excess is the overhead of
more ops and tensors per step (scheduler and futex wake-ups, thread-pool stealing,
malloc), as the plain path's was for hashed tables. Each step, each index shard runs
``DynamicTable.observe`` (a lookup, a candidate lookup, two inserts, a scatter_max and a
dozen small ops) and a lookup for the rows, with ~5 tensors over the network; and the plan
splits the dynamic ``user_id`` into 4 shards where the hashed one has 2 (its index and row
state count toward ``maxShardBytes``), so twice the index shards; but 2 shards instead
(``ETJ_BENCH_MAX_SHARD=256Mi``, single runs, load 10-12) gave the same 71,521 examples/s
as 4 (71,637; hashed 151,714 and 132,165 around them), ps CPU 4.9 + 2.3 instead of
5.4 + 2.8. Ways on from here, none tried: counting and reading in one packed message per
ps with one op chain per shard (as ``models.fused`` does for rows; ``h22c`` merged the
two lookups but not the messages, and saw no gain); one candidate table with
``[count, last_seen]`` values (a checkpoint format change); fewer small ops in
``observe``.

Then (2026-11-26) the first of those: per step each index shard had taken four tensors
(its keys for counting, their counts, its keys again for the rows, the rows back), 24 a
step for this model's 6 index shards. Now, for a whole block of steps (``UNROLL``), each
ps gets one message with the keys, counts and steps of all its index shards and sends
their rows back in one (``FusedTables.dynamic_rows``; each shard counts, then reads its
index once, ``DynamicTable.observe_rows``). It is the same math: within a block only the
counting writes (last-seen steps by maximum, candidate counts by sum) and no read depends
on it; the index changes only in the coordinator's passes between chunks
(``tests/trainer/etj_trainer/models/test_dynamic_training.py``'s same-math under
ParameterServer, ``test_dynamic_fused.py``). With the hashed tables' own gains of that day
(below), measured (``--dynamic --repeat 3 --seconds 30``, load 6-8: an operator benchmark
ran beside it at nice 10): hashed 188,224 / 228,476 / 219,779, dynamic 150,033 / 156,921 /
167,187 examples/s, medians 219,779 and 156,921: **dynamic/hashed 0.71** (pairs 0.80,
0.69, 0.76); CPU-seconds per million examples, dynamic: chief 0.4, ps 2.4-2.8 + 1.3-1.6,
workers 2.4-2.7 (hashed: ps 1.7-1.9 + 0.8-0.9, workers 2.1-2.3).
With the synthetic ids scattered (below; the same command, quiet, load 4-6): hashed
226,612 / 236,950 / 238,708, dynamic 180,662 / 191,082 / 184,256 examples/s: **0.78**
(pairs 0.80, 0.81, 0.77).

``--quick`` on a quiet machine (2026-11-25, nothing else running, load 1-4 from the
benchmark's own processes), three runs: ps/single 0.61, 0.56, 0.51 (median 0.56; CPU
efficiency 0.52, 0.48, 0.44). An earlier median of 0.75 was measured at load 23-41, where
the single process got less of the machine than five.

After the changes below (2026-11-26, quiet machine, load 3-4.5 from the benchmark's own
processes), three runs: ps/single **0.63, 0.69, 0.73 (median 0.69)**, CPU efficiency 0.56,
0.61, 0.63; best single 383,421 / 377,531 / 375,735, best PS 242,139 / 259,209 / 272,562
examples/s. Issue #23's goal (0.7) is met by one run of three, not by the median. The
PS job's examples per CPU-second are steady (130-150k) where its wall-clock rate is not:
in some runs it got ~1.1 of the 2 cores (153k examples/s), in others ~1.8 (264k); three
runs before blocks of 25 (same day, same load): 0.89, 0.67, 0.67, CPU efficiency
0.59-0.61, single 297k-395k.

Each run is its own process (a fresh TensorFlow, both cores). Not a test: nothing here is
asserted; the numbers go into the project's notes.

Read ``CPU efficiency`` (examples per CPU-second, ps over single) next to ``ps/single``:
on a shared machine the wall-clock ratio moves with the other load (a single process
gets less of a busy machine than five do), the CPU ratio hardly does.

Where the PS run's time goes (issue #23; ``perf record -F 199`` on chief, both workers
and both ps for 20 s of steady training, samples per million examples, this model):

- The PS job spent ~2.2x the CPU of ``single`` per example (~1820 samples vs 835); the
  arithmetic (oneDNN matmuls, Eigen kernels, the sparse Adagrad on the ps) is about the
  same in both (~600 vs ~480). The rest is overhead of talking between processes:
  scheduler and futex wake-ups (345 vs 62), thread-pool spinning and stealing (188 vs 73),
  gRPC (150 vs 0), kernel networking (51), malloc (77 vs 31).
- The chief is ~1% of the samples and Python is idle on every task: with 50 steps per
  scheduled function, ClusterCoordinator's dispatch and the closures' return values are
  not the cost; the input pipeline (synthetic data) is a few percent of a worker.
- Every tensor that crosses between a worker and a ps is its own RecvTensor RPC with
  thread wake-ups on both sides. ``tf.nn.embedding_lookup`` on the sharded tables and
  the tape's sparse gradients sent four per table shard and step (ids, rows, gradient
  values, gradient indices): 16 for this model's 4 shards, plus the tower's read and
  gradient. ``etj_trainer.models.fused`` packs them: one tensor of ids to each ps, one of
  rows back, one of gradient rows to it (6 here), the same math (``tests/trainer/
  test_fused.py``, the same-math tests). Measured the same way, that took the PS job from
  ~2320 to ~1820 samples per million examples: gRPC 276 -> 150, wake-ups 440 -> 345,
  spinning 246 -> 188, malloc 134 -> 77.
- Left then: the wake-ups and spinning of five processes' thread pools on two cores.
  Fewer, larger shards (1 instead of 2 for ``user_id``) made no measurable difference.

Then (2026-11-26), four changes aimed at what was left, messages and threads:

- **A step's gradient rows travel with the next step's ids** (``models.fused.Pending``):
  each ps applies them, then gathers, the order of the plain path (same math; the
  same-math tests now run a block of 3 steps under ParameterServer). A block's last step
  sends its gradient alone.
- **The flat tower travels with the rows** of the ps that holds it, and its gradient with
  theirs. Per step and worker: 4 messages (2 per ps), was 8 (3 per ps, the tower's read
  and its gradient).
- **Threads by CPU budget** (``etj_trainer.task.threads.thread_counts``): each replica's
  intra-/inter-op pools are sized to its budget, ``ETJ_CPUS`` (``etj run`` and this
  benchmark's ``LocalJob``: the machine's cores over its processes, 0.4 each here) or the
  container's CPU quota (cgroup v2 or v1), and a server whose budget is below the
  machine's cores does not spin. It was TensorFlow's default: every process sized its
  pools to both cores and spun, five of them on two cores. On a node where a pod has
  its cores (no budget, or one of every core) nothing changes.

- **Blocks of 25 steps** for chunks of at least 25 (``state.LONG_UNROLL``; this job's
  chunks are 50): a block's first step sends its ids alone and its last its gradient
  alone, and each loop iteration sends control messages to every ps. Two pairs (quiet,
  load 4.5-6): 272,862 / 272,547 vs 260,860 / 247,243 examples/s, 149,544 / 149,708 vs
  143,499 / 135,921 per CPU-second. Shorter chunks keep blocks of 10 (compile time).
  Blocks of 50 (the whole chunk, no loop) were slower in three of three pairs (242k /
  234k / 198k vs 269k / 247k / 254k examples/s, 108-133k vs 136-149k per CPU-second).

Side by side, ps runs alternating (``--run ps --seconds 30``; load 7-12, an operator
benchmark beside them at nice 10), examples per CPU-second: pipelined gradients alone
105,066 / 100,095; with the thread budget 118,137 / 114,676; with the tower in the
messages too 133,809 / 130,320 (examples/s 184k / 146k, 186k / 208k, 219k / 225k).
CPU-seconds per million examples went from ps 2.4-2.6 + 1.0-1.1, workers 2.9-3.2 each
to ps 1.9 + 0.9, workers 2.2-2.4.

Then (2026-11-26, later), a new profile (``perf record -F 199 -a -g``, 20 s of steady
training, samples by process) and what came of it:

- **The synthetic ids were not scattered.** The rank multiplier 1,000,003 is 3 modulo
  1,000,000, 200,000 and 1,000, so the popular ranks sat at the low ids: 96 % of
  ``user_id``'s lookups went to its shard 0 (ps 0), where hashed real ids spread evenly.
  Now ``data.pipeline.scatter_multiplier`` (near 0.618 x rows, coprime with them;
  ``tests/trainer/etj_trainer/data/test_pipeline.py``). ps 1 took 1.1-1.2 CPU-seconds per
  million examples instead of 0.9-1.0; ps 0 stays at ~1.9 (``item_id``, 2 ids an example,
  and the tower). The PS job's rate did not move (pairs: 235k either way).
- **Half of ps 0's samples are the Adagrad row updates** (``ResourceSparseApplyAdagradV2``:
  two Eigen expressions per row, ~500 ns a row alone, 2.5x a gather, compute and scatter
  of the same rows, bitwise equal). That is arithmetic a single process pays too: the
  gather/scatter form (float32 Adagrad through ``rowupdate``) made ``single`` 5-15 % faster
  (374k / 360k -> 394k / 417k examples/s) and the PS job no faster (its scatters are
  per-row loops as well, plus a dedup): not adopted here (it would lower ps/single while
  speeding up one process); a candidate on its own merits.
- Tried, no gain (pairs of ``--run ps --seconds 30``, quiet): the tower colocated with a
  shard of ps 1 (232k vs 235k / 237k; ps 0 1.8, ps 1 1.2); ``item_id`` in two shards
  (``ETJ_BENCH_MAX_SHARD=48Mi``: 215k / 208k vs 223k / 227k);
  ``TF_GRPC_WORKER_CACHE_THREADS=1`` (237k / 210k vs 206k / 218k);
  ``GRPC_POLL_STRATEGY=poll`` (246k / 223k / 251k vs 227k / 225k / 247k). The review
  commit before this (Pending built whole) did not slow it (246k / 227k vs 232k / 237k).
- What is left is talk between processes: gRPC ~24 % of all samples (four RecvTensor
  calls a worker step, ~670 KB: the rows and their gradient ~250 KB each way, the flat
  tower 81 KB each way), thread-pool stealing 4-6 %, malloc and copies ~5 %; oneDNN's JIT
  matmuls are ~25 % of a worker's samples, as in ``single``.

``--quick`` three times after that (quiet, load 3-3.5 from the benchmark's own processes):
ps/single **0.62, 0.63, 0.57 (median 0.62)**, CPU efficiency 0.55, 0.55, 0.51; best single
380,581 / 385,120 / 395,178, best PS 237,038 / 241,896 / 226,687 examples/s. The PS job ran
at 210-242k all day (the day before: 242-272k, single 375-383k). Issue #23's goal (0.7) is
not met.

Then (2026-11-26, the next session), the PS job's samples side by side with ``single``'s
(``perf record -F 199 -a -g``, 20 s each, samples per million examples; the machine slower
than the days before: single 351k, PS 210k examples/s under perf):

- The two workers alone (1002) took more than the whole single process (1008, 121 of them
  idle): their arithmetic is the same (oneDNN's JIT matmuls 253 vs 250), the rest is
  talk: gRPC 134, ``SendOp`` 67 (the reply written inline), thread-pool stealing 66,
  malloc 47 (15), futex and scheduling 38.
- The ps (701): the Adagrad row updates 292, where ``single`` pays ~170 for the same rows
  (its kernel's 85 plus the half its second thread runs): the same rows cost 1.7x in a
  process that shares its core with a worker (caches, and the rows it updates were read
  one round trip before). gRPC 153, ``SendOp`` 66.
- Of gRPC and ``SendOp``'s samples, the largest leaves are the kernel waking a thread on
  the other core (``_raw_spin_unlock_irqrestore`` in ``try_to_wake_up``, 25 per million
  on the workers alone) and switching tasks (``finish_task_switch``, 16): in a VM every
  wake-up across cores is an inter-processor interrupt, an exit to the hypervisor.

So each task is now bound to cores (``etj.local.placement``, for ``etj run`` and the
harness's ``LocalJob`` alike: one core each here, workers on different cores, the first ps
not with the first worker), as the kubelet's static CPU manager binds a pod: a process's
threads hand work to each other on one core. Side by side (``--run ps --seconds 30``,
alternating, load 6-7; the machine slower still): unbound 197,791 / 155,045 / 177,055,
bound 202,906 / 194,190 / 230,115 examples/s; per CPU-second 108,459 / 87,186 / 97,274 vs
114,699 / 110,025 / 130,860. An earlier set (pinned by ``taskset`` after start): unbound
182k / 189k / 213k / 186k, bound 242k / 211k / 186k / 203k / 189k.

Tried the same day, not adopted here: transparent huge pages for every process
(``always`` vs ``madvise``, no difference within the noise); the Adagrad update as a
gather, a compute and two writes (bitwise equal to the kernel for distinct rows: made
``single`` 10-20 % faster and the PS job 8 %, ps 0 from 2.1 to 1.5 CPU-seconds per
million examples; with overwrites, a row that two workers update at once loses a step,
and the lock-free kernel's race is far narrower; a change of its own);
one inter-op thread per server (deadlocks: the job made no step); gRPC without its
EventEngine threads (``GRPC_EXPERIMENTS=-event_engine_client,-event_engine_listener,
-event_engine_for_all_other_endpoints``, honoured: gRPC's log lists them off), seven pairs
bound: 235k / 201k / 194k / 222k / 249k / 203k / 245k vs 187k / 220k / 169k / 247k / 210k /
205k / 239k, within the noise; ``user_id`` in one shard (``ETJ_BENCH_MAX_SHARD=256Mi``:
the ps even, 1.7-1.8 and 1.8-1.9 CPU-seconds per million examples instead of 2.1-2.4 and
1.3-1.5) 198k / 201k / 210k vs 181k / 210k / 192k, within the noise too. Bound, the two
cores' loads are those of their ps: worker + ps 0 ~4.1 CPU-seconds per million examples,
worker + ps 1 + chief ~3.4; the busier core sets the pace. The plan balances bytes over
the ps, not the rows they serve per step (``item_id``'s two ids an example sit on ps 0
with a ``user_id`` shard): a plan that balanced both is the next step.

``--quick`` three times, bound (load 4.1-4.7 from the benchmark's own processes; single
at 345-356k where it ran at 375-395k the days before): ps/single **0.64, 0.64, 0.71
(median 0.64)**, CPU efficiency 0.57, 0.57, 0.64; best single 356,141 / 348,311 /
344,658, best PS 228,410 / 223,405 / 243,825 examples/s. Issue #23's goal (0.7) is not
met.

Then (2026-11-26, a third session; the host slower still: single at 293-343k), what was
left to try, side by side (``--run ps --seconds 30`` alternating, or single and PS in
pairs), none adopted:

- **The Adagrad rows with additive writes** (gather the accumulator, add ``g * g``, step;
  ``scatter_add`` the ``g * g`` and ``scatter_sub`` the step: bitwise the kernel's for
  distinct rows, and two workers updating a row at once lose nothing, unlike an
  overwrite). Pairs single + PS: kernel 305k + 203k, 296k + 194k, 296k + 201k (ratios 0.66,
  0.66, 0.68); additive 323k + 218k, 293k + 147k (a slow run), 343k + 227k (0.68, 0.50,
  0.66). Both sped up alike; ps 0 took 2.0 CPU-seconds per million examples instead of
  2.1-2.3 (``scatter_add``/``scatter_sub`` are per-row Eigen loops as the kernel is; only
  the overwrite form, which loses steps under a race, was much cheaper).
- **A plan that balances lookups as well as bytes** (``item_id``, two ids an example, over
  both ps): the ps even (1.6-1.7 and 1.6 CPU-seconds per million examples instead of
  1.8-2.0 and 1.1-1.3) but the job's total CPU rose (7.9-8.2 vs 7.2-8.2: one more segment
  to partition, stitch and update each step): 228k / 228k / 220k vs 233k / 245k / 215k
  examples/s.
- **Binding only some tasks**: ps and chief free (workers bound) 181k / 206k / 220k vs
  201k / 223k / 203k bound; workers free (ps bound) 177k / 184k / 177k vs 170k / 223k /
  218k. Binding every task stays.
- Checked, nothing to gain: the loopback interface carried 624 bytes per example (639 KB a
  worker step, 125 MB/s at 200k examples/s, ~26 packets a step), what the messages above
  predict; no hidden transfer. Minor page faults 0-28 a second per process: no
  allocation churn (glibc's mmap threshold is not the cost).
- **Steps per scheduled function**: ``--spe 50`` (this benchmark's) vs 200 alternating, six
  runs each: 184k / 216k / 174k / 201k / 245k / 244k vs 218k / 225k / 218k / 252k / 225k / 239k
  (medians 208k and 225k, +8 %; every task's CPU per example lower, the slow runs all at
  50), ``--spe 10`` 179k in one run beside 239k / 244k at 200 / 50 (blocks of 10 steps,
  five times the closures). Not adopted as this benchmark's setting: its PS job stays as
  first measured.

``--quick`` three times after them (quiet; load 2.3-5.4 from the benchmark's own
processes; the host fast again, single at 334-374k): ps/single **0.75, 0.67, 0.59 (median
0.67)**, CPU efficiency 0.64, 0.61, 0.53; best single 371,319 / 371,988 / 374,285, best PS
279,516 / 250,612 / 221,602 examples/s. The single process is steady, the PS job is not:
208-280k examples/s within half an hour, 117-157k per CPU-second (the same work costing up
to a third more CPU in one run than in another). Issue #23's goal (0.7) is not met.

Then (2026-11-26, a fourth session, on a freshly booted and much faster host: single at
418-522k, the PS job at 286-379k), the cost of each scheduled function, timed in the chief
(each ``ClusterCoordinator`` worker thread: the call, the copy of its results to the chief,
the wait for the next closure; ``--run ps --seconds 30`` per ``--spe``). A closure costs a
worker ~25 ms of wall time besides its steps: the results' copy 5-9 ms (three values, one
round trip each), the chief's pause before the next call 1-3 ms, and ~17 ms inside the
call (a call of 25 steps took 140 ms, one of 100 steps 510 ms, in a pair of runs), the
dispatch of the function's parts to the ps and their set-up. At ``--spe 50`` that would
be ~10 % of a worker's time (~5 % at 100: 378k / 382k examples/s vs 254k / 327k at 25 in
alternating runs) — an estimate across runs, which vary by as much: ``perf record -a -g``
of a run at 25 and one at 100 (285k and 374k examples/s, 6.1 and 4.7 CPU-seconds per
million examples) showed no set-up function of its own in the first, the extra CPU spread
over the same kernels, executor and rendezvous symbols as in the second. Only the two
costs the chief times are sure. Now the chunk's three results travel as one packed value
(``TrainingState.train_chunk_packed``): the copy took 2-3 ms instead of 5-9, the time
between closures 1-2 % of the wall time instead of 2-4 %. Too little to see in a
throughput that varies by a quarter from run to run.

``--quick`` six times that day (load 1.8-6.6, from the benchmark's own processes): before
the packed results 0.71, 0.74, 0.67 (median 0.71), with them 0.76, 0.62, 0.58 (median
0.62); all six: median 0.69. CPU efficiency 0.64, 0.66, 0.60, 0.68, 0.56, 0.53. The
single process is now the noisier: its best of two was 418-422k in some runs and
494-522k in others (262k vs 315k examples per CPU-second), the PS job's best 297-379k.
Issue #23's goal (0.7) is met by the median of one set of three, not by the other's.

Then (2026-11-26, a fifth session, the host faster still: single at 469-583k), ``--quick``
three times (load 2.6-5.6 from the benchmark's own processes): ps/single **0.67, 0.71,
0.66 (median 0.67)**, CPU efficiency 0.59, 0.64, 0.59; best single 583,181 / 556,028 /
559,363, best PS 390,477 / 397,430 / 371,891 examples/s. The single process again in two
modes (469-483k at 297-305k per CPU-second, 556-583k at 352-373k), the PS job at 327-397k
(184-224k per CPU-second). Issue #23's goal (0.7) is not met.

What a user without a ``stepsPerExecution`` gets moved instead: the schema's default was
10 for every strategy, and under ParameterServer each scheduled function costs its worker
its dispatch (above). Now a job that leaves it out runs 50 under ParameterServer and 10
otherwise (``etj.api.trainer.TrainerConfig.steps_per_execution``). Side by side (``--run ps
--seconds 30``, alternating, load 0.6-8.9): ``--spe 10`` 282,425 / 258,207 examples/s
(159,165 / 146,507 per CPU-second), ``--spe 50`` 315,473 / 324,020 (180,385 / 182,343).
This benchmark's PS job set 50 itself, as it always had: its ratio did not move (until below).

Tried the same day, not adopted: another allocator for every process (``LD_PRELOAD`` of
Debian's ``libtcmalloc-minimal4`` or ``libjemalloc2``; malloc was 47-77 samples per million
examples in the PS job's profile). ``--run ps --seconds 30``, alternating, load 6.9-8.9:
glibc 366,576 / 354,756 / 327,488, tcmalloc 336,006 / 370,143 / 356,396, jemalloc 368,377 /
371,861 / 341,052 examples/s (medians 355k, 356k, 368k; every task's CPU per example the
same to 0.1 CPU-second per million); ``single`` in pairs 475,731 / 516,878 (glibc) vs
516,717 / 463,003 (tcmalloc). Within the noise.

``--quick --sets 3`` once more, later (load 3.1-7.2): ps/single 0.75, 0.70, 0.59 (exactly
0.748, 0.696, 0.593: median 0.696), CPU efficiency 0.66, 0.64, 0.54; best single 544,500 /
438,352 / 505,892, best PS 407,633 / 305,277 / 300,106 examples/s (the host slowed between
the first set and the others). With the morning's three: six comparisons, median 0.68. Issue
#23's goal (0.7) is not met.

Then (2026-11-26, a sixth session) the closure's cost once more, on the product's side: a
fixed count fits one model only (50 steps are 0.3 s of this one and minutes of a wide one).
A ParameterServer job that leaves ``stepsPerExecution`` out now gets chunks sized by time
(``etj_trainer.task.chunk_size``: about a second each, timed on the worker inside the
chunk's function; here 50 steps took 0.325 s, then 150-200 steps a chunk), and this
benchmark's PS job leaves it out as a user would. First, fixed counts side by side (``--run
ps --seconds 30 --spe N``, 50 / 200 / 400 in turn, load 5.4-10.1): 301,965 / 313,698 /
327,301, then 300,056 / 436,579 / 436,486 (the host changed speed between the first two),
then 378,772 / 388,722 examples/s: ~+3-8 % from 50 to 200 or 400, none between 200 and 400.
Then sized by time against ``--spe 50``, alternating (load 5.5-9.4, the host in its slow
mode): 286,416 / 250,442 / 252,233 vs 185,818 / 231,754 / 235,319 examples/s (199,666 /
178,097 / 178,801 vs 155,975 / 180,815 / 166,838 per CPU-second; the first ``--spe 50`` run
shared the machine with a short test run).

``--quick --sets 3`` twice after it (load 0.6-7.4 from the benchmark's own processes):
ps/single **0.754, 0.719, 0.780 (median 0.754)**, CPU efficiency 0.65, 0.63, 0.69, best
single 552,981 / 537,455 / 496,328, best PS 417,038 / 386,214 / 387,030 examples/s; then
**0.734, 0.821, 0.733 (median 0.734)**, CPU efficiency 0.64, 0.71, 0.64, best single
557,388 / 552,389 / 502,889, best PS 409,234 / 453,655 / 368,429. All six comparisons
>= 0.7 (the morning's six at ``--spe 50``: median 0.68): issue #23's goal is met.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# tests/trainer (harness, zoo) after the product: its etj_trainer/ holds the trainer's tests.
for _p in (ROOT / "tests" / "trainer", ROOT / "operator", ROOT / "trainer_image"):
    sys.path.insert(0, str(_p))

from harness import LocalJob, trainer_config, trainer_env  # noqa: E402

from etj.api.progress import DYNAMIC_TABLES_KEY  # noqa: E402
from etj.api.spec import EmbeddingTrainingJobSpec  # noqa: E402

BATCH = 1024


# ``--dynamic``: user_id and item_id as dynamic tables of as many rows (fallback + pool).
DYNAMIC_FALLBACK = 1000


def _id_table(name: str, rows: int, dynamic: bool, **extra: Any) -> dict[str, Any]:
    table = {"name": name, "vocabularySize": rows, "dimension": 32, **extra}
    if dynamic:
        table["vocabularySize"] = DYNAMIC_FALLBACK
        table["dynamic"] = {"capacity": rows - DYNAMIC_FALLBACK, "evictAfterSteps": 2000}
    return table


def model_doc(dynamic: bool = False) -> dict[str, Any]:
    return {
        "embeddings": [
            _id_table("user_id", 1_000_000, dynamic),
            _id_table("item_id", 200_000, dynamic, idsPerExample=2),
            {"name": "category", "vocabularySize": 1000, "dimension": 16},
        ],
        "denseFeatures": 13,
        "hiddenUnits": [128, 64],
    }


def job_spec(steps: int, spe: int | None, dynamic: bool = False) -> EmbeddingTrainingJobSpec:
    """The benchmark's job; ``spe`` None leaves ``stepsPerExecution`` out (the product's
    default: under ParameterServer, chunks sized by time)."""
    return EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 2},
                "ps": {"replicas": 2},
            },
            "model": model_doc(dynamic),
            "data": {"source": "synthetic", "synthetic": {"seed": 3}},
            "training": {
                "batchSizePerReplica": BATCH,
                "steps": steps,
                "optimizer": "adagrad",
                "learningRate": 0.05,
                **({} if spe is None else {"stepsPerExecution": spe}),
            },
            "sharding": {"maxShardBytes": os.environ.get("ETJ_BENCH_MAX_SHARD", "128Mi")},
        }
    )


# --- the runs, each in its own process ---------------------------------------------------


def run_single(seconds: float) -> tuple[float, float]:
    """The trainer's training function in one process (default strategy)."""
    import tensorflow as tf

    from etj_trainer.data.pipeline import make_dataset
    from etj_trainer.task.state import TrainingState

    config = trainer_config(job_spec(10**9, 50))
    state = TrainingState(config, tf.distribute.get_strategy())
    it = iter(make_dataset(config.model, config.data, BATCH))
    chunk = tf.constant(50, tf.int64)
    state.train_chunk(it, chunk)  # trace and warm up
    steps, start, cpu0 = 0, time.perf_counter(), _own_cpu()
    while time.perf_counter() - start < seconds:
        loss, *_ = state.train_chunk(it, chunk)
        steps += 50
    float(loss)
    examples = steps * BATCH
    return examples / (time.perf_counter() - start), examples / (_own_cpu() - cpu0)


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _processes() -> Iterator[tuple[int, list[str]]]:
    """Every live process: its pid and the fields of /proc/<pid>/stat after its name
    ([1] parent pid, [2] process group, [11] and [12] user and system ticks)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        yield int(entry), fields


def _tree_cpu(pids: list[int]) -> float:
    """CPU seconds of processes and their children (a supervised trainer is two)."""
    tick = os.sysconf("SC_CLK_TCK")
    wanted, total = set(pids), 0.0
    for pid, fields in _processes():
        if pid in wanted or int(fields[1]) in wanted:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_naive(seconds: float) -> float:
    """Keras 3: one Embedding layer per table, Dense tower, ``fit`` on the same data."""
    import keras
    import tensorflow as tf

    from etj_trainer.data.pipeline import make_dataset

    config = trainer_config(job_spec(10**9, 50))
    spec = config.model
    inputs, pooled = {}, []
    for t in spec.embeddings:
        inputs[t.name] = keras.Input((t.ids_per_example,), dtype="int64", name=t.name)
        vectors = keras.layers.Embedding(t.vocabulary_size, t.dimension)(inputs[t.name])
        pooled.append(keras.ops.mean(vectors, axis=1))
    inputs["dense_input"] = keras.Input((spec.dense_features,), name="dense_input")
    x = keras.layers.Concatenate()([*pooled, inputs["dense_input"]])
    for units in spec.hidden_units:
        x = keras.layers.Dense(units, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, name="logit")(x))
    model.compile(
        optimizer=keras.optimizers.Adagrad(0.05),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    names = {t.name: t.name for t in spec.embeddings} | {"dense": "dense_input"}
    ds = make_dataset(spec, config.data, BATCH).map(
        lambda b: ({names[k]: v for k, v in b.items() if k in names}, b["label"])
    )
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0)  # trace and warm up
    steps_per_epoch = 20
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        model.fit(ds, steps_per_epoch=steps_per_epoch, epochs=1, verbose=0)
        steps += steps_per_epoch
    del tf
    return steps * BATCH / (time.perf_counter() - start)


def run_ps(seconds: float, spe: int | None, dynamic: bool = False) -> tuple[float, dict[str, Any]]:
    """etj's PS trainer on chief + 2 workers + 2 ps; examples/s of the steady state."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-ps-"))
    config = trainer_config(job_spec(10**9, spe, dynamic))
    job = LocalJob(config, workdir, workers=2, ps=2, env={"ETJ_PROGRESS_SECONDS": "2"})
    try:
        job.start_all()
        deadline = time.monotonic() + 300
        while job.step() == 0:
            job.check_chief_alive()
            if time.monotonic() > deadline:
                raise TimeoutError("the PS job made no step in 300 s")
            time.sleep(0.5)
        pids = [p.pid for p in job.procs.values()]
        roles = {k: [p.pid] for k, p in job.procs.items()}
        first = (time.monotonic(), job.step(), _tree_cpu(pids))
        role_cpu = {k: _tree_cpu(v) for k, v in roles.items()}
        time.sleep(seconds)  # the job runs; the measurement is its own step counter
        job.check_chief_alive()
        last = (time.monotonic(), job.step(), _tree_cpu(pids))
        role_cpu = {k: _tree_cpu(v) - role_cpu[k] for k, v in roles.items()}
        rates = [e["examplesPerSecond"] for e in job.events() if e["event"] == "progress"][2:]
        examples = (last[1] - first[1]) * BATCH
        eps = examples / (last[0] - first[0])
        return eps, {
            "reported_median": statistics.median(rates) if rates else None,
            "per_cpu_second": examples / (last[2] - first[2]),
            "plan": [(t.name, t.shards, t.ps_of_shard) for t in config.shard_plan.tables],
            "load": os.getloadavg()[0],
            # CPU-seconds per million examples, by task: where the time goes.
            "cpu_per_million": {
                f"{role}{index}": round(cpu * 1e6 / examples, 1)
                for (role, index), cpu in sorted(role_cpu.items())
            },
            "dynamic": (job.last("progress") or {}).get(DYNAMIC_TABLES_KEY),
        }
    finally:
        job.close()
        shutil.rmtree(workdir, ignore_errors=True)


def group_memory(pgid: int, field: str = "VmRSS") -> list[int]:
    """``field`` of /proc/<pid>/status (VmRSS, VmHWM...) in bytes, for each process of a
    task's process group (a supervised trainer is two)."""
    out = []
    for pid, fields in _processes():
        if int(fields[2]) != pgid:
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        out += [int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith(field + ":")]
    return out


def _peak_rss_bytes(pgid: int) -> int:
    """The largest peak resident set (VmHWM) in a task's process group (trainer + child)."""
    return max(group_memory(pgid, "VmHWM"), default=0)


def _first_last(events: list[dict[str, Any]], key: str) -> tuple[Any, Any] | None:
    return (events[0].get(key), events[-1].get(key)) if events else None


def run_large_table(steps: int) -> dict[str, Any]:
    """A >2 GB table (10M x 64 float32 + Adagrad slot) over 4 ps: train and checkpoint,
    then resume after a chief kill and after a ps kill; the ps's peak memory each time."""
    workdir = Path(tempfile.mkdtemp(prefix="etj-bench-large-"))
    spec = EmbeddingTrainingJobSpec.model_validate(
        {
            "strategy": "ParameterServer",
            "replicas": {
                "chief": {"replicas": 1},
                "worker": {"replicas": 2},
                "ps": {"replicas": 4},
            },
            "model": {
                "embeddings": [{"name": "user_id", "vocabularySize": 10_000_000, "dimension": 64}],
                "denseFeatures": 13,
                "hiddenUnits": [64],
            },
            "training": {
                "batchSizePerReplica": 1024,
                "steps": steps,
                "optimizer": "adagrad",
                "learningRate": 0.05,
                "stepsPerExecution": 50,
            },
            "sharding": {
                "maxShardBytes": os.environ.get("ETJ_BENCH_LARGE_MAX_SHARD", "512Mi"),
                "defaultPsMemory": "4Gi",
            },
        }
    )
    config = trainer_config(
        spec, checkpoint_dir=workdir / "ckpt", every_steps=steps, keep=2, watchdog_seconds=900
    )
    table = config.shard_plan.tables[0]
    job = LocalJob(config, workdir, workers=2, ps=4, env={"ETJ_PROGRESS_SECONDS": "5"})
    started = time.monotonic()
    try:
        job.start_all()
        done = job.wait_done(timeout=3600)
        trained = time.monotonic() - started
        ckpt_bytes = sum(p.stat().st_size for p in (workdir / "ckpt").glob("ckpt-*"))
        progress = [e for e in job.events() if e["event"] == "progress"]
        peaks_trained = [_peak_rss_bytes(job.procs[("ps", i)].pid) for i in range(4)]
        gib = lambda b: round(b / 2**30, 2)  # noqa: E731
        result: dict[str, Any] = {
            "table_bytes_with_slots": table.bytes,
            "shards": table.shards,
            "ps_of_shard": table.ps_of_shard,
            "steps": done["step"],
            "train_and_checkpoint_seconds": round(trained, 1),
            "checkpoint_bytes": ckpt_bytes,
            "loss_first_last": _first_last(progress, "loss"),
            "examples_per_second_last": progress[-1].get("examplesPerSecond") if progress else None,
            "ps_held_gib": gib(table.bytes / 4),
            "ps_memory_request_gib": [gib(p.memory_request_bytes) for p in config.shard_plan.ps],
            "ps_peak_rss_gib_trained": [gib(b) for b in peaks_trained],
        }
        # Two resumes, each to ``steps`` more: a chief kill (a new chief restores into the
        # running ps), then a ps kill (every ps and the chief restart; restore into new ps).
        for phase, restart in (("chief_kill", ["chief"]), ("ps_kill", ["ps", "chief"])):
            job.set_steps(done["step"] + steps)
            began = time.monotonic()
            if "ps" in restart:
                for i in range(4):
                    job.kill("ps", i)
                    job.start("ps", i)
            job.start("chief", 0)
            done = job.wait_done(timeout=3600)
            restored = job.last("restored") or {}
            after = [e for e in job.events() if e["event"] == "progress"]
            result[phase] = {
                "restored_step": restored.get("step"),
                "restore_seconds": restored.get("seconds"),
                "finished_step": done["step"],
                "loss_first_last": _first_last(after, "loss"),
                "seconds": round(time.monotonic() - began, 1),
                "ps_peak_rss_gib": [
                    gib(_peak_rss_bytes(job.procs[("ps", i)].pid)) for i in range(4)
                ],
            }
        return result
    finally:
        job.close()
        shutil.rmtree(workdir, ignore_errors=True)


# --- the driver -------------------------------------------------------------------------


def _in_subprocess(mode: str, seconds: float, extra: list[str], env: dict[str, str]) -> Any:
    out = subprocess.run(
        [sys.executable, __file__, "--run", mode, "--seconds", str(seconds), *extra],
        env=trainer_env(env),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{out.stdout[-3000:]}\n{out.stderr[-20000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spe_args(spe: int | None) -> list[str]:
    return [] if spe is None else ["--spe", str(spe)]


def dynamic_vs_hashed(seconds: float, spe: int | None, repeat: int) -> int:
    """The PS run with hashed tables and with dynamic ones, alternating, ``repeat`` times:
    the median examples/s of each and their ratio (goal: dynamic / hashed >= 0.7)."""
    rates: dict[str, list[float]] = {"hashed": [], "dynamic": []}
    for _ in range(repeat):
        for kind in rates:
            extra = _spe_args(spe) + (["--dynamic"] if kind == "dynamic" else [])
            eps, info = _in_subprocess("ps", seconds, extra, {})
            rates[kind].append(eps)
            print(
                f"etj PS {kind:<8}: {eps:10,.0f} examples/s "
                f"({info['per_cpu_second']:,.0f} per CPU-second), load {info['load']:.1f}, "
                f"CPU-s per 1M examples {info['cpu_per_million']}"
                + (f", tables {info['dynamic']}" if info["dynamic"] else ""),
                flush=True,
            )
    hashed, dynamic = (statistics.median(rates[k]) for k in ("hashed", "dynamic"))
    print(
        f"median of {repeat}: hashed {hashed:,.0f} dynamic {dynamic:,.0f} examples/s; "
        f"dynamic/hashed={dynamic / hashed:.2f} (load average {os.getloadavg()[0]:.1f})"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="shorter measurements (~10 min in all)"
    )
    parser.add_argument("--seconds", type=float, default=None, help="measurement time per run")
    parser.add_argument(
        "--spe", type=int, default=None, help="stepsPerExecution of the PS run (default: left out)"
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="alternating single/ps runs (best kept)"
    )
    parser.add_argument(
        "--sets",
        type=int,
        default=1,
        help="whole comparisons in a row; prints each ps/single, their median and the load",
    )
    parser.add_argument("--large-table", action="store_true", help="the >2 GB table run instead")
    parser.add_argument("--large-steps", type=int, default=2000)
    parser.add_argument(
        "--dynamic",
        action="store_true",
        help="the PS run with dynamic user_id/item_id tables vs hashed ones (median of --repeat)",
    )
    parser.add_argument("--run", choices=["single", "naive", "ps"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds or (30.0 if args.quick else 90.0)
    if args.run == "single":
        print(json.dumps(run_single(seconds)))
        return 0
    if args.run == "naive":
        print(json.dumps(run_naive(seconds)))
        return 0
    if args.run == "ps":
        print(json.dumps(run_ps(seconds, args.spe, args.dynamic)))
        return 0
    if args.dynamic:
        return dynamic_vs_hashed(seconds, args.spe, args.repeat)
    if args.large_table:
        print(json.dumps(run_large_table(args.large_steps), indent=1))
        return 0
    ratios = []
    for n in range(args.sets):
        if args.sets > 1:
            print(f"set {n + 1} of {args.sets}, load average {_load()}", flush=True)
        ratios.append(compare(seconds, args.spe, args.repeat, naive=n == 0))
    if args.sets > 1:
        print(
            f"sets: ps/single {', '.join(f'{r:.3f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.3f}; load average {_load()}"
        )
    return 0


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def compare(seconds: float, spe: int | None, repeat: int, naive: bool) -> float:
    """``single`` and ``ps`` alternating ``repeat`` times (and ``naive`` once): prints the
    best of each and returns ps/single."""
    # Best of ``repeat`` alternating runs: other load on the machine only ever slows a run.
    singles, pss, info = [], [], {}
    cpu_single, cpu_ps = [], []
    for _ in range(repeat):
        eps, per_cpu = _in_subprocess("single", seconds, [], {})
        singles.append(eps)
        cpu_single.append(per_cpu)
        print(
            f"single-process raw TF : {eps:12,.0f} examples/s ({per_cpu:,.0f} per CPU-second)",
            flush=True,
        )
        eps, info = _in_subprocess("ps", seconds, _spe_args(spe), {})
        pss.append(eps)
        cpu_ps.append(info["per_cpu_second"])
        print(
            f"etj PS chief+2w+2ps   : {eps:12,.0f} examples/s ({info['per_cpu_second']:,.0f} per CPU-second)",
            flush=True,
        )
    single, ps = max(singles), max(pss)
    print(f"best: single {single:,.0f}  ps {ps:,.0f} examples/s; plan {info['plan']}")
    # Examples per CPU-second hardly depend on other load on the machine: a cross-check.
    print(f"CPU efficiency ps/single={max(cpu_ps) / max(cpu_single):.2f}")
    if naive:
        # Keras 3 must be Keras 3 here: no legacy switch.
        slow = _in_subprocess("naive", seconds, [], {"TF_USE_LEGACY_KERAS": "0"})
        print(f"naive Keras 3 loop    : {slow:12,.0f} examples/s", flush=True)
        print(f"ps/single={ps / single:.2f} ps/naive={ps / slow:.2f}", flush=True)
    else:
        print(f"ps/single={ps / single:.2f}", flush=True)
    return ps / single


if __name__ == "__main__":
    sys.exit(main())
