// A training run that keeps its progress in the run's state, so the
// dashboard can replay it epoch by epoch (state.batch and state.set events).

interface TrainingInput {
  epochs?: number
  targetAccuracy?: number
}

export const config = defineQueueConfig({
  queue: {
    name: 'ml',
    defaultJobOptions: { attempts: 2, backoff: { type: 'fixed', delay: 200 } },
  },
  flow: {
    name: 'ml-training',
    role: 'entry',
    step: 'train',
    stateSchema: {
      type: 'object',
      properties: {
        status: { enum: ['idle', 'training', 'evaluating', 'complete'] },
        epoch: { type: 'integer', minimum: 0 },
        totalEpochs: { type: 'integer', minimum: 1 },
        accuracy: { type: 'number' },
        loss: { type: 'number' },
        startTime: { type: 'string' },
      },
    },
  },
})

// One epoch of a pretend model: accuracy climbs, loss falls.
function trainEpoch(epoch: number): { accuracy: number, loss: number } {
  return { accuracy: Math.min(0.99, 0.6 + epoch * 0.1), loss: Math.max(0.01, 1 / (epoch + 1)) }
}

export default defineQueueWorker(async (input: TrainingInput, ctx) => {
  const epochs = input.epochs ?? 3
  const target = input.targetAccuracy ?? 0.95
  await ctx.state.setBatch({
    status: 'training',
    epoch: 0,
    totalEpochs: epochs,
    accuracy: 0,
    loss: 1,
    startTime: new Date().toISOString(),
  })
  ctx.logger.info('Training started', { epochs })

  for (let epoch = 1; epoch <= epochs; epoch++) {
    const result = trainEpoch(epoch)
    await ctx.state.setBatch({ epoch, accuracy: result.accuracy, loss: result.loss })
    await ctx.progress(Math.round((epoch / epochs) * 100))
    ctx.logger.debug(`Epoch ${epoch}/${epochs}`, result)

    // A read after a write in the same step sees it.
    const accuracy = await ctx.state.get<number>('accuracy')
    if (accuracy !== null && accuracy >= target) {
      ctx.logger.info('Target accuracy reached', { epoch, accuracy })
      break
    }
  }

  await ctx.state.set('status', 'complete')
  ctx.logger.info('Training complete')
  return await ctx.state.getAll()
})
