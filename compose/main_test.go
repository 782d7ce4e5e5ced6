package compose

import (
	"os"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestMain quiets compose-go's logrus warnings (a variable nested in a
// default is substituted by compose-go without the caller's options), as
// the gpurun command does, so that test and benchmark output stays readable.
func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.ErrorLevel)
	os.Exit(m.Run())
}
