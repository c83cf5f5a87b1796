// Starts the Durable Streams Node reference server (@durable-streams/server,
// version pinned in bench/package.json) for bench/http.sh and stays up until
// SIGTERM/SIGINT.
//
//   PORT=4437 [HOST=127.0.0.1] [DATA_DIR=/tmp/x] node bench/node-server.mjs
//
// Without DATA_DIR the server keeps streams in memory (its default). With
// DATA_DIR it uses its file-backed store (FileBackedStreamStore: one append-only
// log file per stream plus LMDB metadata); each append is written and then
// fdatasync'd before the response.
import { DurableStreamTestServer } from "@durable-streams/server"

const port = Number(process.env.PORT ?? "4437")
const host = process.env.HOST ?? "127.0.0.1"
const dataDir = process.env.DATA_DIR || undefined

const server = new DurableStreamTestServer({
  port,
  host,
  longPollTimeout: 30_000,
  ...(dataDir ? { dataDir } : {}),
})

const url = await server.start()
console.log(
  `node reference server listening on ${url} (${dataDir ? `file-backed: ${dataDir}` : "in-memory"})`
)

let stopping = false
async function shutdown(signal) {
  if (stopping) return
  stopping = true
  console.log(`received ${signal}, stopping`)
  const timer = setTimeout(() => process.exit(0), 5000)
  timer.unref()
  try {
    await server.stop()
  } finally {
    process.exit(0)
  }
}
process.on("SIGTERM", () => shutdown("SIGTERM"))
process.on("SIGINT", () => shutdown("SIGINT"))
