// A host app for the Nuxt Queue v0.5 UI alone: no server-side rendering, so
// every call the UI makes leaves the browser and reaches nqd through the
// front proxy; the module's own backend uses files and memory, never Redis.
export default defineNuxtConfig({
  ssr: false,
  pages: true,
  modules: ['@nuxt/ui', 'nvent', '@nvent-addon/app', './modules/nqd-flows'],
  css: ['~/assets/css/main.css'],
  ui: { fonts: false },
  nvent: { queue: { adapter: 'file' }, stream: { adapter: 'memory' }, store: { adapter: 'file' } },
})
