package netbudget

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"
)

func TestGrowWaitsForRelease(t *testing.T) {
	b := New(100)
	a := b.Lease()
	if err := a.Grow(context.Background(), 80); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l := b.Lease() // holds nothing: may wait
		got <- l.Grow(context.Background(), 50)
	}()
	select {
	case err := <-got:
		t.Fatalf("Grow returned %v while the budget was spent, want it to wait", err)
	case <-time.After(50 * time.Millisecond):
	}
	a.Release()
	if err := <-got; err != nil {
		t.Fatalf("Grow after release: %v", err)
	}
}

func TestGrowEndsWithContext(t *testing.T) {
	b := New(100)
	a := b.Lease()
	_ = a.Grow(context.Background(), 100)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := b.Lease().Grow(ctx, 1)
	if !errors.Is(err, ErrExhausted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Grow with a cancelled context = %v, want ErrExhausted and context.Canceled", err)
	}
	// The audit tells a gap in coverage from a malformed answer by this method.
	var u interface{ Unreachable() bool }
	if !errors.As(err, &u) || !u.Unreachable() {
		t.Fatalf("a budget error is not Unreachable: %v", err)
	}
}

func TestGrowBeyondLimitFails(t *testing.T) {
	if err := New(10).Lease().Grow(context.Background(), 11); !errors.Is(err, ErrExhausted) {
		t.Fatalf("Grow(11) of a 10-byte budget = %v, want ErrExhausted", err)
	}
}

// Two holders that both want more than is left: one must fail at once rather than both waiting
// for the other until their deadlines.
func TestHoldersDoNotDeadlock(t *testing.T) {
	b := New(100)
	x, y := b.Lease(), b.Lease()
	_ = x.Grow(context.Background(), 50)
	_ = y.Grow(context.Background(), 50)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for _, l := range []*Lease{x, y} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Grow(ctx, 30)
			if err != nil {
				l.Release() // a failed reader gives back what it held
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	var failed, ok int
	for err := range errs {
		if err != nil {
			failed++
		} else {
			ok++
		}
	}
	if failed != 1 || ok != 1 || ctx.Err() != nil {
		t.Fatalf("failed %d, succeeded %d, context %v: want one of each, long before the deadline", failed, ok, ctx.Err())
	}
}

func TestReadAllHoldsWhatItKeeps(t *testing.T) {
	b := New(2 << 20) // doubling holds old and new buffers while copying: 1.5 times max
	for _, tc := range []struct {
		name      string
		size, max int64
		hint      int64
	}{
		{"Announced", 5000, 1 << 19, 5000},
		{"Unannounced", 300000, 1 << 19, -1},
		{"TooLarge", 900000, 1 << 19, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := b.Lease()
			body, err := l.ReadAll(context.Background(), io.LimitReader(zeros{}, tc.size), tc.max, tc.hint)
			if err != nil {
				t.Fatal(err)
			}
			if want := min(tc.size, tc.max+1); int64(len(body)) != want {
				t.Fatalf("read %d bytes, want %d", len(body), want)
			}
			if l.Held() != int64(cap(body)) {
				t.Fatalf("lease holds %d bytes, the buffer is %d", l.Held(), cap(body))
			}
			l.Release()
			if used, _ := b.Stats(); used != 0 {
				t.Fatalf("%d bytes still held after release", used)
			}
		})
	}
}

func TestReadAllWaitsThenFailsAtDeadline(t *testing.T) {
	b := New(64 << 10)
	hog := b.Lease()
	_ = hog.Grow(context.Background(), 60<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Lease().ReadAll(ctx, bytes.NewReader(make([]byte, 40<<10)), 1<<20, -1)
	if !errors.Is(err, ErrExhausted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadAll under a spent budget = %v, want ErrExhausted at the deadline", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
