// The Nuxt Queue era A name of emit, handleTrigger, works too.
export const config = defineQueueConfig({
  queue: { name: 'payments' },
  flow: {
    name: ['orders'],
    role: 'step',
    step: 'charge_payment',
    subscribes: 'order.received',
    emits: ['payment.charged'],
  },
})

// Subscribed to one event, the step gets its payload, as in Nuxt Queue.
export default defineQueueWorker(async (order: { orderId: string, total: number }, ctx) => {
  ctx.logger.info(`Charging ${order.total} for ${order.orderId}`)
  await ctx.flow.handleTrigger('payment.charged', { orderId: order.orderId, amount: order.total })
  return { charged: order.total }
})
