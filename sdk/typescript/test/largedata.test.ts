// Large step data by reference through the TypeScript SDK: a 10 MiB input,
// result and emit payload, on an nqd whose archive (a directory: the
// bucket's driver is nqd's concern, tested in Go against an S3-compatible
// server) keeps values by reference.

import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { createWorker } from '../src/index.js'
import { memoryLogger, startNqd, type Nqd } from './nqd.js'

interface Ref { sha256: string, bytes: number, url: string }

describe('large step data', () => {
  let nqd: Nqd
  const archive = mkdtempSync(join(tmpdir(), 'nqd-ts-archive-'))
  before(async () => { nqd = await startNqd({ env: { NQ_ARCHIVE_DIR: archive, NQ_MAX_BODY_BYTES: String(48 << 20) } }) })
  after(async () => {
    await nqd.close()
    rmSync(archive, { recursive: true, force: true })
  })

  it('travels by reference from a worker back to a client', async () => {
    const q = 'ts-large'
    await nqd.putFlow({ name: q, entry: 'ingest', steps: { ingest: { queue: q, emits: ['ingested'] }, transform: { queue: q, subscribes: ['ingested'] } } })
    const big = '0123456789abcdef'.repeat((10 << 20) / 16)
    const seen: number[] = []
    const w = createWorker({
      url: nqd.url,
      queues: [q],
      concurrency: 1,
      claimWaitMs: 1000,
      logger: memoryLogger(),
      handlers: {
        ingest: async (input: { blob: string }, ctx) => {
          assert.equal(input.blob, big) // the run's input, kept by reference too
          await ctx.flow.emit('ingested', { blob: big })
          return big
        },
        transform: (input: { ingested: { blob: string } }) => {
          seen.push(input.ingested.blob.length)
          assert.equal(input.ingested.blob, big)
          return { bytes: input.ingested.blob.length }
        },
      },
    })
    const running = w.start()
    const began = performance.now()
    let runId: string
    try {
      runId = await nqd.start(q, { blob: big })
      const run = await nqd.finished(runId, 120_000)
      assert.equal(run.state.status, 'completed')
    } finally {
      await w.stop(2000)
      await running
    }
    const took = (performance.now() - began) / 1000
    assert.deepEqual(seen, [big.length])

    // An SSE client reads the run from its start: ingest's completion
    // carries the reference, and its url answers the value.
    const ctl = new AbortController()
    const res = await fetch(`${nqd.url}/api/_events/flow/${runId}/stream`, { signal: ctl.signal, headers: { accept: 'text/event-stream' } })
    assert.equal(res.status, 200)
    let ref: Ref | undefined
    let buf = ''
    const decoder = new TextDecoder()
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buf += decoder.decode(chunk, { stream: true })
      for (let i = buf.indexOf('\n'); i >= 0 && ref === undefined; i = buf.indexOf('\n')) {
        const line = buf.slice(0, i)
        buf = buf.slice(i + 1)
        if (!line.startsWith('data:')) {
          continue
        }
        const msg = JSON.parse(line.slice(5)) as { event: string, record: { step?: string, data?: { result?: { $nqdRef?: Ref } } } }
        if (msg.event === 'step.completed' && msg.record.step === 'ingest') {
          ref = msg.record.data?.result?.$nqdRef
          assert.ok(ref !== undefined, `ingest's completion carries ${JSON.stringify(msg.record.data)}, want a reference`)
        }
      }
      if (ref !== undefined) {
        break
      }
    }
    ctl.abort()
    assert.ok(ref !== undefined, 'no completion of ingest on the stream')
    const value = JSON.stringify(big)
    assert.equal(ref.sha256, createHash('sha256').update(value).digest('hex'))
    assert.equal(ref.bytes, value.length)
    const got = await fetch(nqd.url + ref.url)
    assert.equal(got.status, 200)
    assert.equal(await got.text(), value)
    console.log(`10 MiB input, result and emit through the TypeScript SDK: ${took.toFixed(2)}s`)
  })
})
