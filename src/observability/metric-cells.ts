import type { Registry } from "prom-client";

/**
 * Counters, gauges and histograms whose per-label-set state is a plain object the hot path keeps:
 * `inc`/`observe` is a property update, with no label validation or hashing per call (prom-client
 * validates and hashes the labels on every call, even through `labels()` children). The registry
 * renders them with everything else at scrape time, in the same exposition format.
 */
type LabelValues<L extends string> = Record<L, string>;

interface MetricValue {
  labels: Record<string, string | number>;
  value: number;
  metricName?: string;
}

interface RegisteredMetric {
  name: string;
  help: string;
  type: "counter" | "gauge" | "histogram";
  aggregator: "sum";
  get(): { name: string; help: string; type: string; values: MetricValue[]; aggregator: "sum" };
}

export interface CounterCell {
  inc(by?: number): void;
}

export interface GaugeCell {
  set(value: number): void;
}

export interface HistogramCell {
  observe(value: number): void;
}

/**
 * At most this many label sets per metric; label values come from code and route patterns. Past
 * it, every new label set shares one more, rendered with each label `other` (`overflowValue`), so
 * the totals still count every update.
 */
const maxCells = 10_000;
const overflowValue = "other";

abstract class CellMetric<L extends string, C> implements RegisteredMetric {
  abstract readonly type: "counter" | "gauge" | "histogram";
  readonly aggregator = "sum" as const;
  protected readonly cells = new Map<string, { labels: LabelValues<L>; cell: C }>();

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly L[],
  ) {
    registry.registerMetric(this as never);
  }

  /** The cell of one label set: look it up once and keep it, or call per use (one map lookup). */
  cell(labels: LabelValues<L>): C {
    let values = this.labelNames.map((name) => labels[name]);
    let key = values.join("\u0000");
    let found = this.cells.get(key);
    if (found) return found.cell;
    if (this.cells.size >= maxCells) {
      values = this.labelNames.map(() => overflowValue);
      key = values.join("\u0000");
      found = this.cells.get(key);
      if (found) return found.cell;
    }
    const cell = this.create();
    // Kept in the declared label order, as prom-client renders them.
    const ordered = Object.fromEntries(this.labelNames.map((name, index) => [name, values[index]]));
    this.cells.set(key, { labels: ordered as LabelValues<L>, cell });
    return cell;
  }

  protected abstract create(): C;
  protected abstract values(labels: LabelValues<L>, cell: C): MetricValue[];

  get() {
    const values: MetricValue[] = [];
    for (const { labels, cell } of this.cells.values()) values.push(...this.values(labels, cell));
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }
}

class ValueCell implements CounterCell, GaugeCell {
  value = 0;
  inc(by = 1) {
    this.value += by;
  }
  set(value: number) {
    this.value = value;
  }
}

/** A metric whose cell holds one number: counters and gauges differ only in their type line. */
abstract class ValueMetric<L extends string, C> extends CellMetric<L, C> {
  protected create(): C {
    return new ValueCell() as C;
  }
  protected values(labels: LabelValues<L>, cell: C) {
    return [{ labels, value: (cell as ValueCell).value }];
  }
}

export class CellCounter<L extends string = never> extends ValueMetric<L, CounterCell> {
  readonly type = "counter";
}

export class CellGauge<L extends string = never> extends ValueMetric<L, GaugeCell> {
  readonly type = "gauge";
}

class BucketCell implements HistogramCell {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length);
  }
  observe(value: number) {
    if (!Number.isFinite(value)) return;
    this.sum += value;
    this.count += 1;
    const bounds = this.bounds;
    for (let index = 0; index < bounds.length; index++) {
      if (value <= (bounds[index] as number)) {
        (this.counts[index] as number)++;
        return;
      }
    }
  }
}

export class CellHistogram<L extends string = never> extends CellMetric<L, HistogramCell> {
  readonly type = "histogram";
  private readonly bounds: readonly number[];

  constructor(registry: Registry, name: string, help: string, labelNames: readonly L[], buckets: number[]) {
    super(registry, name, help, labelNames);
    this.bounds = [...buckets].sort((a, b) => a - b);
  }

  protected create() {
    return new BucketCell(this.bounds);
  }

  protected values(labels: LabelValues<L>, cell: HistogramCell) {
    const { counts, sum, count } = cell as BucketCell;
    const values: MetricValue[] = [];
    let cumulative = 0;
    this.bounds.forEach((bound, index) => {
      cumulative += counts[index] as number;
      values.push({ labels: { le: bound, ...labels }, value: cumulative, metricName: `${this.name}_bucket` });
    });
    values.push({ labels: { le: "+Inf", ...labels }, value: count, metricName: `${this.name}_bucket` });
    values.push({ labels, value: sum, metricName: `${this.name}_sum` });
    values.push({ labels, value: count, metricName: `${this.name}_count` });
    return values;
  }
}
