// Ready scenarios from RFD 129: config layers (lowest precedence first) and a batch. None
// records actions: each opens with every entry pending, at the approval gate.
export const EXAMPLES = [
  {
    id: 'renumber',
    title: 'Renumber chain on key rfd',
    layers: [
      {
        name: 'plugin: jp-rfd',
        text: `# Every jp-rfd tool that writes shares one key: one at a time, in written order.
[conversation.tools.rfd_renumber]
concurrency = { key = "rfd" }

[conversation.tools.rfd_draft]
concurrency = { key = "rfd" }

# Reads leave it unset: they start together once the batch is approved.
[conversation.tools.rfd_list]
source = "local"
`,
      },
      { name: 'user', text: '[conversation.tools.rfd_list]\nfan_out = true\n' },
    ],
    batch: `# Each renumber frees the id the next one needs.
n1 rfd_renumber 120   # 008 -> 011
n2 rfd_renumber 80    # 007 -> 010
n3 rfd_renumber 80    # 006 -> 009
n4 rfd_renumber 80    # 005 -> 008
d1 rfd_draft 60
d2 rfd_draft 60
ls rfd_list*2 50
`,
  },
  {
    id: 'github',
    title: 'Shared GitHub quota: limit 2 across two tools',
    layers: [
      {
        name: 'workspace',
        text: `# One endpoint, one quota: two executions among both tools.
[conversation.tools.github_issues]
concurrency = { key = "github", limit = 2 }

[conversation.tools.github_pulls]
concurrency = { key = "github", limit = 2 }
`,
      },
    ],
    batch: `i1 github_issues 150
p1 github_pulls 100
i2 github_issues 100
p2 github_pulls 50
i3 github_issues 100
`,
  },
  {
    id: 'delete',
    title: 'Fan-out delete with on_error = "stop"',
    layers: [
      {
        name: 'workspace',
        text: `# One at a time, calls and operations alike; the operations of one call stop
# at the first failure.
[conversation.tools.fs_delete_file]
concurrency = 1
fan_out = { on_error = "stop" }

[conversation.tools.fs_read_file]
fan_out = true
`,
      },
    ],
    batch: `# Operation #1 fails: #2 and #3 are stopped, the reads are not affected.
del fs_delete_file*4 60 fail#1
r fs_read_file*2 40
`,
  },
  {
    id: 'rate-limit',
    title: 'A rate-limited API with delay',
    layers: [
      {
        name: 'workspace',
        text: `# Two at once, starts at least 250 ms apart; a call that hits a 429 runs
# again in its place after Retry-After, at most twice.
[conversation.tools.search]
concurrency = { key = "search-api", limit = 2, delay = "250ms", retries = 2 }
`,
      },
    ],
    batch: `s1 search 400
s2 search 400 429=600   # its first run gets a 429 with Retry-After 600 ms
s3 search 300
s4 search 200
`,
  },
  {
    id: 'adaptive',
    title: 'A 429 storm with an adaptive limit (AIMD)',
    layers: [
      {
        name: 'workspace',
        text: `# An endpoint whose right limit is unknown: start at 4, halve on each 429
# (never below 1), grow by one after as many clean ends as the limit is.
[conversation.tools.llm]
concurrency = { key = "llm", limit = { max = 4, min = 1, adapt = "aimd" }, retries = 3 }
`,
      },
    ],
    batch: `# Three of the first four get a 429: they started together, so the limit halves
# once, to 2, and grows back as calls started since end clean.
a llm 300 429=200
b llm 300 429=200
c llm 300 429=200
d llm 300
e llm 300
f llm 300
g llm 300
h llm 300
`,
  },
  {
    id: 'renumber-chain',
    title: "RFD 129's renumber chain with a key set",
    layers: [
      {
        name: 'workspace',
        text: `# A renumber frees one draft and takes another: it takes both numbers' keys
# at once, so it waits only for calls on either number, never for the rest.
[conversation.tools.rfd_renumber]
concurrency = [{ key = "rfd:{id}" }, { key = "rfd:{new}" }]
[conversation.tools.rfd_read]
concurrency = { key = "rfd:{id}" }
`,
      },
    ],
    batch: `# 008 -> 011 -> 012 is a chain: the second step waits for the first, and the
# read of 012 for the second. 003 -> 004 and the read of 005 run beside them.
n1 rfd_renumber 300 id:008 new:011
n2 rfd_renumber 300 id:011 new:012
n3 rfd_renumber 300 id:003 new:004
r1 rfd_read 100 id:012
r2 rfd_read 100 id:005
`,
  },
  {
    id: 'coding-agent-tree',
    title: "A coding agent's files as one tree (path keys)",
    layers: [
      {
        name: 'workspace',
        text: `# Every file tool names the tree "fs" and the path it touches. Two calls
# conflict when one path is the other's or lies under it: src/a.rs against
# src and the root, never against docs. A move takes both its paths; the
# test run takes the whole tree.
[conversation.tools.write_file]
concurrency = { key = "fs", path = "{path}" }
[conversation.tools.move_file]
concurrency = [{ key = "fs", path = "{src}" }, { key = "fs", path = "{dst}" }]
[conversation.tools.run_tests]
concurrency = { key = "fs", path = "/" }
`,
      },
    ],
    batch: `# w1, w2 and the move run at once; w3 writes w1's file (./src/a.rs is
# src/a.rs) and waits for it; the tests wait for every write before them,
# and w4, written after the tests, waits behind them.
w1 write_file 300 path:src/a.rs
w2 write_file 200 path:src/b.rs
w3 write_file 200 path:./src/a.rs
m1 move_file 250 src:docs/x.md dst:src/c.rs
t1 run_tests 400
w4 write_file 100 path:README.md
`,
  },
  {
    id: 'github-quota',
    title: 'A GitHub quota with its windows (rate and burst)',
    layers: [
      {
        name: 'workspace',
        text: `# GitHub's REST quota: 100 requests at once, 900 a minute and 5,000 an hour.
# Each window is kept as GCRA: its count at an even pace (5000/h is one
# start per 720 ms), and a burst of 5 at once after a quiet spell.
[conversation.tools.github_search]
concurrency = { key = "github", limit = 100, rate = ["900/min", "5000/h"], burst = 5 }
[conversation.tools.github_issue]
concurrency = { key = "github", limit = 100, rate = ["900/min", "5000/h"], burst = 5 }
`,
      },
    ],
    batch: `# Five go at once; the rest follow one per 720 ms (the hourly window's pace).
s1 github_search 300
s2 github_search 300
i1 github_issue 300
i2 github_issue 300
s3 github_search 300
s4 github_search 300
i3 github_issue 300
i4 github_issue 300
`,
  },
];
