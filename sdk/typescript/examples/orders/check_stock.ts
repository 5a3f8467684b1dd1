export const config = defineQueueConfig({
  queue: { name: 'orders' },
  flow: {
    name: ['orders'],
    role: 'step',
    step: 'check_stock',
    subscribes: ['order.received'],
    emits: ['stock.checked'],
  },
})

export default defineQueueWorker(async (input: { items: { sku: string, qty: number }[] }, ctx) => {
  const items = input.items
  const reserved = items.reduce((n, i) => n + i.qty, 0)
  ctx.logger.info(`Reserved ${reserved} items`)
  await ctx.flow.emit('stock.checked', { reserved })
  return { reserved }
})
