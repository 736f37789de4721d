import { PolledStatus } from '../polled';

/** The smallest status: a number asked from a queue of answers, with what it saw. */
class Counter extends PolledStatus<number> {
  constructor(private answers: Array<number | Error>) {
    super({ name: 'test', interval: 1000, auto: false, standby: 'never' });
  }
  applied: number[] = [];
  failures: string[] = [];
  open = true;
  asked = 0;
  push(value: number): void {
    this.answered(value);
  }
  protected canRefresh(): boolean {
    return this.open;
  }
  protected async ask(): Promise<number> {
    this.asked++;
    const answer = this.answers.shift()!;
    if (answer instanceof Error) {
      throw answer;
    }
    return answer;
  }
  protected apply(value: number): void {
    this.applied.push(value);
  }
  protected fail(reason: unknown): void {
    this.failures.push((reason as Error).message);
  }
}

describe('PolledStatus', () => {
  it('applies answers and hands a failed ask to fail(), keeping what it applied', async () => {
    const counter = new Counter([1, new Error('down')]);
    await counter.refresh();
    await counter.refresh();
    await counter.ready;
    expect(counter.asked).toBe(2);
    expect(counter.applied).toEqual([1]);
    expect(counter.failures).toEqual(['down']);
    counter.dispose();
  });

  // An answer asked before a status given directly is dropped: see model.spec.ts.

  it('asks nothing when it cannot refresh, or once disposed', async () => {
    const counter = new Counter([1]);
    counter.open = false;
    await counter.refresh();
    counter.open = true;
    counter.dispose();
    await counter.refresh();
    counter.push(3);
    expect(counter.asked).toBe(0);
    expect(counter.applied).toEqual([]);
    expect(counter.isDisposed).toBe(true);
  });
});
