// A step file in plain JavaScript: the same config and handler.
export const config = defineQueueConfig({
  queue: { name: 'orders' },
  flow: {
    name: ['orders'],
    role: 'step',
    step: 'ship',
    subscribes: ['order.approved'],
  },
})

export default defineQueueWorker(async (input, ctx) => {
  const order = await ctx.state.get('order')
  await ctx.state.set('order', { ...order, status: 'shipped' })
  ctx.logger.info(`Shipped ${input.orderId}`)
  return { shipped: true }
})
