// The entry of the orders flow: takes the order and lets stock and payment
// work on it at the same time.

interface Order {
  orderId: string
  items: { sku: string, qty: number }[]
  total: number
}

export const config = defineQueueConfig({
  queue: {
    name: 'orders',
    defaultJobOptions: { attempts: 3, backoff: { type: 'exponential', delay: 200 } },
  },
  flow: {
    name: ['orders'],
    role: 'entry',
    step: 'receive_order',
    emits: ['order.received'],
  },
})

export default defineQueueWorker(async (input: Order, ctx) => {
  if (input.items.length === 0) {
    // Nothing to retry: an empty order is wrong every time.
    throw new PermanentError(`order ${input.orderId} has no items`)
  }
  ctx.logger.log('info', `Order ${input.orderId} received`, { jobId: ctx.jobId, attempt: ctx.attempt })
  await ctx.state.set('order', { id: input.orderId, total: input.total, status: 'received' })
  await ctx.flow.emit('order.received', input)
  return { orderId: input.orderId }
})
