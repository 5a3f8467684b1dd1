// The HTTP client reaches nqd under a base URL with a path prefix and
// credentials as node:http would reach that URL given as a string.

import assert from 'node:assert/strict'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { Http } from '../src/http.js'

describe('Http', () => {
  let server: http.Server
  let port = 0
  const seen: Array<{ url: string | undefined, auth: string | undefined, method: string | undefined }> = []

  before(async () => {
    server = http.createServer((req, res) => {
      seen.push({ url: req.url, auth: req.headers.authorization, method: req.method })
      res.setHeader('content-type', 'application/json')
      res.end('{"ok":true}')
    })
    await new Promise<void>((resolve) => { server.listen(0, '127.0.0.1', resolve) })
    port = (server.address() as AddressInfo).port
  })
  after(async () => {
    await new Promise<void>((resolve) => { server.close(() => { resolve() }) })
  })

  it('keeps the base path and sends the URL credentials', async () => {
    const c = new Http({ url: `http://u%40x:p%3Aq@127.0.0.1:${port}/prefix/` })
    try {
      assert.deepEqual(await c.post('/api/x?y=1', { a: 1 }), { ok: true })
      assert.deepEqual(await c.get('/api/z'), { ok: true })
    } finally {
      c.close()
    }
    const basic = 'Basic ' + Buffer.from('u@x:p:q').toString('base64')
    assert.deepEqual(seen, [
      { url: '/prefix/api/x?y=1', auth: basic, method: 'POST' },
      { url: '/prefix/api/z', auth: basic, method: 'GET' },
    ])
  })

  it('sends no credentials when the URL has none', async () => {
    seen.length = 0
    const c = new Http({ url: `http://127.0.0.1:${port}` })
    try {
      await c.get('/healthz')
    } finally {
      c.close()
    }
    assert.deepEqual(seen, [{ url: '/healthz', auth: undefined, method: 'GET' }])
  })
})
