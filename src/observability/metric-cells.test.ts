import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { CellCounter, CellGauge, CellHistogram } from "./metric-cells.js";

/** The cells must render exactly what prom-client's own classes render for the same updates. */
describe("metric cells", () => {
  it("render like prom-client's counter, gauge and histogram", async () => {
    const buckets = [0.001, 0.01, 0.1, 0.5];
    const observations = [0.0005, 0.001, 0.002, 0.05, 0.3, 0.7, 12, Number.NaN];

    const ours = new Registry();
    const requests = new CellCounter(ours, "x_requests_total", "Requests", ["route", "status"]);
    const depth = new CellGauge(ours, "x_depth", "Depth", []);
    const latency = new CellHistogram(ours, "x_seconds", "Latency", ["route"], buckets);
    requests.cell({ route: "/a", status: "200" }).inc();
    requests.cell({ route: "/a", status: "200" }).inc(2);
    requests.cell({ status: "429", route: "/b" }).inc();
    depth.cell({}).set(7);
    depth.cell({}).set(4);
    for (const value of observations) latency.cell({ route: "/a" }).observe(value);
    latency.cell({ route: "/b" }).observe(0.02);

    const theirs = new Registry();
    const counter = new Counter({
      name: "x_requests_total",
      help: "Requests",
      labelNames: ["route", "status"],
      registers: [theirs],
    });
    const gauge = new Gauge({ name: "x_depth", help: "Depth", registers: [theirs] });
    const histogram = new Histogram({
      name: "x_seconds",
      help: "Latency",
      labelNames: ["route"],
      buckets,
      registers: [theirs],
    });
    counter.inc({ route: "/a", status: "200" });
    counter.inc({ route: "/a", status: "200" }, 2);
    counter.inc({ route: "/b", status: "429" });
    gauge.set(4);
    for (const value of observations.filter(Number.isFinite)) histogram.observe({ route: "/a" }, value);
    histogram.observe({ route: "/b" }, 0.02);

    expect(await ours.metrics()).toBe(await theirs.metrics());
    expect(await ours.metrics()).toContain('x_seconds_bucket{le="0.01",route="/a"} 3');
  });

  it("keeps one cell per label set, whatever the key order", () => {
    const counter = new CellCounter(new Registry(), "y_total", "Y", ["a", "b"]);
    expect(counter.cell({ a: "1", b: "2" })).toBe(counter.cell({ b: "2", a: "1" }));
    expect(counter.cell({ a: "1", b: "3" })).not.toBe(counter.cell({ a: "1", b: "2" }));
  });

  it("renders the label sets past the cap as one, every label `other`, so no count is lost", async () => {
    const registry = new Registry();
    const counter = new CellCounter(registry, "z_total", "Z", ["route", "status"]);
    const histogram = new CellHistogram(registry, "z_seconds", "Z", ["route"], [1]);
    for (let index = 0; index < 10_005; index++) {
      counter.cell({ route: `/r${index}`, status: "200" }).inc();
      histogram.cell({ route: `/r${index}` }).observe(0.5);
    }
    const text = await registry.metrics();
    const counts = text.split("\n").filter((line) => line.startsWith("z_total{"));
    expect(counts).toHaveLength(10_001);
    expect(counts.reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(" ") + 1)), 0)).toBe(10_005);
    expect(text).toContain('z_total{route="other",status="other"} 5');
    expect(text).toContain('z_seconds_count{route="other"} 5');
    expect(text).toContain('z_seconds_bucket{le="1",route="other"} 5');
  });
});
