// The upstream suite, unmodified, against the server at STRATA_URL.
import { describe } from "vitest"
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.STRATA_URL
if (!baseUrl) {
  throw new Error("STRATA_URL is not set: run conformance/run.sh")
}

describe("strata", () => {
  runConformanceTests({ baseUrl, subscriptions: true })
})
